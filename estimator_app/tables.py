"""The results table in human units, the "how this is computed" note, and the exact downloads."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING

from estimator.report import to_csv
from estimator.units import format_bytes

if TYPE_CHECKING:
    import pandas as pd

    from estimator.result import Estimate

TRAINING_LABEL = "Training with Adam (no activations)"
METHODS = {
    "exact": "built with the model's own code on PyTorch's meta device (no weights) and every "
    "parameter and buffer counted; exact, checked byte for byte against real CPU builds",
    "stored": "read from the checkpoint's safetensors headers on the Hub (dtype and shape of every "
    "stored tensor); exact for what the checkpoint holds",
    "simulated": "the real forward/backward/optimizer step run under fake tensors, tracking the bytes alive at each instant",
    "formula": "a closed-form formula (documented in the core); an approximation",
}


def results_frame(estimate: Estimate) -> pd.DataFrame:
    """One line per dtype, in binary units (GiB/MiB), with the method and notes."""
    import pandas as pd

    records = []
    for row in estimate.rows:
        record = {
            "dtype": row.dtype,
            "Largest layer": format_bytes(row.largest_layer_bytes),
            "Total size": format_bytes(row.total_bytes),
            TRAINING_LABEL: format_bytes(row.training_adam_bytes),
        }
        if estimate.mode != "load":
            record[f"Peak ({estimate.mode})"] = format_bytes(row.peak_bytes)
        record["method"] = row.method
        records.append(record)
    return pd.DataFrame.from_records(records)


def summary(estimate: Estimate) -> str:
    """One Markdown line naming what was estimated."""
    revision = f" @ `{estimate.revision[:12]}`" if estimate.revision else ""
    arch = f" ({estimate.architecture})" if estimate.architecture else ""
    return f"**{estimate.model}**{revision}{arch} · library {estimate.library} · source {estimate.source} · mode {estimate.mode}"


def method_note(estimate: Estimate) -> str:
    """Markdown: how each row was computed, and its notes."""
    lines = ["**How this is computed.** Sizes are binary units (1 GiB = 1024³ bytes); exact byte counts are in the CSV and JSON downloads."]
    for method in dict.fromkeys(row.method for row in estimate.rows):
        dtypes = ", ".join(row.dtype for row in estimate.rows if row.method == method)
        lines.append(f"- *{method}* ({dtypes}): {METHODS.get(method, method)}.")
    lines.append(
        "- *Training with Adam*: weights + gradients + AdamW's two moments (+ fp32 master weights for 16-bit rows, "
        "mixed precision); activations are not included."
    )
    for row in estimate.rows:
        for note in row.notes:
            lines.append(f"- {row.dtype}: {note}")
    return "\n".join(lines)


def result_key(estimate: Estimate) -> str:
    """A short digest of the result's JSON: the same result reuses the same download folder."""
    import hashlib

    return hashlib.sha256(json.dumps(estimate.to_dict(), sort_keys=True).encode()).hexdigest()[:24]


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")[:80] or "estimate"


def write_downloads(estimate: Estimate, folder: Path) -> tuple[Path, Path]:
    """Write ``<model>.csv`` and ``<model>.json`` (exact integers) into ``folder``; return their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    stem = _slug(estimate.model.rstrip("/").split("/")[-1] if estimate.source == "local" else estimate.model)
    csv_path = folder / f"{stem}-memory.csv"
    json_path = folder / f"{stem}-memory.json"
    csv_path.write_text(to_csv(estimate), encoding="utf-8")
    json_path.write_text(json.dumps(estimate.to_dict(), indent=2) + "\n", encoding="utf-8")
    return csv_path, json_path
