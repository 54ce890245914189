"""The stacked bar chart's data: one bar per dtype (and per load/training view), stacked by part.

What exists is charted, and the title says which it is:

- rows with ``components`` (inference/training peaks): the components at the peak instant;
- otherwise (load mode): a "load" bar of weights (``total_bytes``) and, where the row can be
  trained, a "train (Adam)" bar stacking the weights and what ``training_adam_bytes`` adds on top
  (gradients, AdamW moments and, for 16-bit rows, fp32 master weights; no activations).

Values are in GiB (floats, for plotting only); exact bytes are in the CSV/JSON downloads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

    from estimator.result import Estimate

GiB = 1024**3
COLUMNS = ("bar", "part", "GiB")
ADAM_EXTRA = "with Adam: gradients + states (+ fp32 master)"  # sorts after "weights": stacked on top
COLORS = {
    "weights": "#3b82f6",
    ADAM_EXTRA: "#f97316",
    "gradients": "#f97316",
    "optimizer_states": "#a855f7",
    "activations": "#22c55e",
    "temporaries": "#94a3b8",
    "kv_cache": "#eab308",
    "inputs": "#64748b",
}


# Every bar label in display order, for the plot's fixed ``sort`` (dtypes in the core's order).
BAR_ORDER: list[str] = [
    label for dtype in ("float32", "float16", "bfloat16", "float8", "int8", "int4") for label in (dtype, f"{dtype} load", f"{dtype} train")
]


def chart_frame(estimate: Estimate) -> pd.DataFrame:
    """Long-format rows ``(bar, part, GiB)`` for Gradio's ``BarPlot(x="bar", y="GiB", color="part")``."""
    import pandas as pd

    records: list[tuple[str, str, float]] = []
    for row in estimate.rows:
        if row.components:
            for part, value in row.components.items():
                records.append((row.dtype, part, value / GiB))
            continue
        if row.total_bytes is not None:
            records.append((f"{row.dtype} load", "weights", row.total_bytes / GiB))
        if row.training_adam_bytes is not None and row.total_bytes is not None:
            records.append((f"{row.dtype} train", "weights", row.total_bytes / GiB))
            records.append((f"{row.dtype} train", ADAM_EXTRA, (row.training_adam_bytes - row.total_bytes) / GiB))
    return pd.DataFrame.from_records(records, columns=list(COLUMNS))


def chart_title(estimate: Estimate) -> str:
    if any(row.components for row in estimate.rows):
        return f"Memory at the {estimate.mode} peak, by component (GiB)"
    return "Load, and Adam training without activations (GiB)"
