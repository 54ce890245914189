"""Render an :class:`~estimator.result.Estimate` as a table, JSON, CSV or Markdown (text only)."""

from __future__ import annotations

import csv
import io
import json

from estimator.options import OutputFormat
from estimator.result import Estimate
from estimator.units import format_bytes

# What training_adam_bytes counts (was "Training using Adam (no activations)", accelerate's name for another figure:
# docs/CONTRACT.md, "Changes"); accelerate's own figure is accelerate_training_bytes in JSON and CSV.
TRAINING_LABEL = "Weights+grads+AdamW states"
FOOTER = ("Sizes in binary units (1 GiB = 1024^3 bytes). Weights+grads+AdamW states = what a training step keeps besides "
          "activations (16-bit rows: also the float32 master weights of mixed precision); accelerate estimate-memory's "
          "\"Training using Adam\" is another figure: accelerate_training_bytes in --json.")
COLUMNS = ("dtype", "Largest Layer", "Total Size", TRAINING_LABEL)


def _cells(estimate: Estimate) -> list[list[str]]:
    rows = []
    for row in estimate.rows:
        label = str(row.dtype) if row.weights_held is None else f"{row.dtype} [{row.weights_held}]"
        cells = [label, format_bytes(row.largest_layer_bytes), format_bytes(row.total_bytes), format_bytes(row.training_adam_bytes)]
        if estimate.mode != "load":
            peak = format_bytes(row.peak_bytes)
            cells.append(peak if row.cpu_bytes is None else f"{peak} (+ {format_bytes(row.cpu_bytes)} CPU per node)")
        rows.append(cells)
    return rows


def _header(estimate: Estimate) -> list[str]:
    header = list(COLUMNS)
    if estimate.mode != "load":
        strategy = estimate.options.get("strategy")
        world = (estimate.options.get("gpus") or 1) * (estimate.options.get("nodes") or 1)
        header.append(f"Peak ({estimate.mode}, per GPU: {world} x {strategy})" if strategy else f"Peak ({estimate.mode})")
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


def _fit_lines(estimate: Estimate) -> list[str]:
    """One line per row fitted to a GPU (``--gpu``): the verdict, what it counts, the largest batch and sequence."""
    lines = []
    for row in estimate.rows:
        fit = row.fit
        if fit is None:
            continue
        head = f"{row.dtype} on {fit['gpu']} ({format_bytes(fit['capacity_bytes'])} for PyTorch): "
        if fit["fits"] is None:
            lines.append(head + "unknown (no figure to compare)")
            continue
        if fit.get("answer"):  # a GGUF row: llama.cpp's offload plan, the sentence of the table and the note
            lines.append(f"{row.dtype} on {fit['gpu']} ({format_bytes(fit['capacity_bytes'])}, less the CUDA context): {fit['answer']}")
            continue
        room = fit["headroom_bytes"]
        verdict = f"fits, {format_bytes(room)} free" if fit["fits"] else f"does not fit, {format_bytes(-room)} short"
        extra = [f"needs {format_bytes(fit['needed_bytes'])} with the CUDA runtime"]
        shape = estimate.options
        if fit.get("max_batch_size") is not None:
            extra.append(f"largest batch at {shape.get('seq_len') or '?'} tokens: {fit['max_batch_size']:,}"
                         if fit.get("max_seq_len") is not None or shape.get("seq_len") else f"largest batch: {fit['max_batch_size']:,}")
        elif fit.get("batch_boundary") is not None:
            extra.append("not even batch 1 fits")
        if fit.get("max_seq_len") is not None:
            step = (fit.get("seq_boundary") or {}).get("step", 1)
            extra.append(f"longest sequence at batch {shape.get('batch_size', 1)}: {fit['max_seq_len']:,}"
                         + (f" (in steps of {step} tokens)" if step > 1 else ""))
        if fit.get("warning"):
            extra.append(fit["warning"])
        lines.append(head + verdict + " (" + "; ".join(extra) + ")")
    return lines


def to_table(estimate: Estimate) -> str:
    header = _header(estimate)
    body = _cells(estimate)
    widths = [max(len(h), *(len(r[i]) for r in body)) for i, h in enumerate(header)]
    line = "+" + "+".join("-" * (w + 2) for w in widths) + "+"

    def fmt(cells: list[str]) -> str:
        return "|" + "|".join(f" {c:<{w}} " if i == 0 else f" {c:>{w}} " for i, (c, w) in enumerate(zip(cells, widths, strict=True))) + "|"

    parts = [_title(estimate), line, fmt(header), line, *(fmt(r) for r in body), line]
    parts.append(FOOTER)
    parts.extend(_fit_lines(estimate))
    parts.extend(_notes(estimate))
    return "\n".join(parts)


def to_markdown(estimate: Estimate) -> str:
    header = _header(estimate)
    lines = [f"**{_title(estimate)}**", "", "| " + " | ".join(header) + " |", "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    lines.extend("| " + " | ".join(cells) + " |" for cells in _cells(estimate))
    lines.append("")
    lines.append(FOOTER.replace("1024^3", "1024³"))
    notes = _fit_lines(estimate) + _notes(estimate)
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
