"""Render an :class:`~estimator.result.Estimate` as a table, JSON, CSV or Markdown (text only)."""

from __future__ import annotations

import csv
import io
import json

from estimator.options import OutputFormat
from estimator.result import Estimate
from estimator.units import format_bytes

TRAINING_LABEL = "Training using Adam (no activations)"
COLUMNS = ("dtype", "Largest Layer", "Total Size", TRAINING_LABEL)


def _cells(estimate: Estimate) -> list[list[str]]:
    rows = []
    for row in estimate.rows:
        cells = [row.dtype, format_bytes(row.largest_layer_bytes), format_bytes(row.total_bytes), format_bytes(row.training_adam_bytes)]
        if estimate.mode != "load":
            cells.append(format_bytes(row.peak_bytes))
        rows.append(cells)
    return rows


def _header(estimate: Estimate) -> list[str]:
    header = list(COLUMNS)
    if estimate.mode != "load":
        header.append(f"Peak ({estimate.mode})")
    return header


def _title(estimate: Estimate) -> str:
    revision = f" @ {estimate.revision[:12]}" if estimate.revision else ""
    arch = f" ({estimate.architecture})" if estimate.architecture else ""
    return f"Memory for {estimate.model}{revision}{arch} [{estimate.library}, source: {estimate.source}]"


def _notes(estimate: Estimate) -> list[str]:
    lines = []
    for row in estimate.rows:
        for note in row.notes:
            lines.append(f"{row.dtype} ({row.method}): {note}")
    return lines


def to_table(estimate: Estimate) -> str:
    header = _header(estimate)
    body = _cells(estimate)
    widths = [max(len(h), *(len(r[i]) for r in body)) for i, h in enumerate(header)]
    line = "+" + "+".join("-" * (w + 2) for w in widths) + "+"

    def fmt(cells: list[str]) -> str:
        return "|" + "|".join(f" {c:<{w}} " if i == 0 else f" {c:>{w}} " for i, (c, w) in enumerate(zip(cells, widths, strict=True))) + "|"

    parts = [_title(estimate), line, fmt(header), line, *(fmt(r) for r in body), line]
    parts.append("Sizes in binary units (1 GiB = 1024^3 bytes). Training = weights + gradients + AdamW states; activations not included.")
    parts.extend(_notes(estimate))
    return "\n".join(parts)


def to_markdown(estimate: Estimate) -> str:
    header = _header(estimate)
    lines = [f"**{_title(estimate)}**", "", "| " + " | ".join(header) + " |", "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    lines.extend("| " + " | ".join(cells) + " |" for cells in _cells(estimate))
    lines.append("")
    lines.append("Binary units (1 GiB = 1024³ bytes). Training = weights + gradients + AdamW states; activations not included.")
    notes = _notes(estimate)
    if notes:
        lines.append("")
        lines.extend(f"- {note}" for note in notes)
    return "\n".join(lines)


def to_csv(estimate: Estimate) -> str:
    buffer = io.StringIO()
    estimate.to_dataframe().to_csv(buffer, index=False, quoting=csv.QUOTE_MINIMAL)
    return buffer.getvalue()


def to_json(estimate: Estimate) -> str:
    return json.dumps(estimate.to_dict(), indent=2)


RENDERERS = {
    OutputFormat.TABLE: to_table,
    OutputFormat.JSON: to_json,
    OutputFormat.CSV: to_csv,
    OutputFormat.MARKDOWN: to_markdown,
}


def render(estimate: Estimate, output_format: OutputFormat) -> str:
    return RENDERERS[output_format](estimate)
