"""The "fits on" table and the verdict for one GPU, the same for every mode (CLI and app).

What must fit is :func:`estimator.fit.runtime.needed_bytes`: the peak (load mode: the loaded
weights) plus the runtime overhead for that GPU, compared with the memory its driver reports.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from estimator.fit import gguf_fit
from estimator.fit.gpus import GPU, GPUS
from estimator.fit.runtime import needed_bytes
from estimator.units import format_bytes

if TYPE_CHECKING:
    import pandas as pd

    from estimator.result import Estimate, Row

__all__ = ["allocator_counted", "fits_caption", "fits_frame", "verdict"]


def verdict(row: Row, mode: str, gpu: GPU) -> str:
    """One cell: "fits (x free)", "does not fit (x short)" or "unknown"; a bfloat16 row on a GPU
    without bfloat16 units says so (PyTorch emulates it there, slowly, or refuses). A GGUF inference row:
    "fits", "fits with N of M layers on the GPU (CPU share ...)" or "does not fit", from llama.cpp's offload plan."""
    gguf = gguf_fit.answer(row, gpu)  # a GGUF row: llama.cpp's offload plan, the same sentence as its note and the CLI
    if gguf is not None:
        return gguf.text()
    needed = needed_bytes(row, mode, gpu)
    if needed is None:
        return "unknown"
    text = (f"fits ({format_bytes(gpu.total_bytes - needed)} free)" if needed <= gpu.total_bytes
            else f"does not fit ({format_bytes(needed - gpu.total_bytes)} short)")
    if str(row.dtype) == "bfloat16" and gpu.native_bf16 is False:
        text += "; no native bfloat16"
    return text


def fits_frame(estimate: Estimate, selected: str | None = None) -> pd.DataFrame:
    """One line per GPU (the ``selected`` one first): its name, a verdict per dtype row, and the
    memory its driver reports; with a row's fit answer (``Row.fit``) for the selected GPU, the
    largest batch and context that fit; where rows carry their traced costs (a GPU named), each GPU's
    speed from them (roofline, :func:`estimator.speed.transformers_speed.speed_cell`)."""
    import pandas as pd

    order = sorted(GPUS, key=lambda g: g.name != selected) if selected else list(GPUS)
    speeds = any(row.speed_costs is not None for row in estimate.rows)  # transformers rows with --gpu (docs/speed.md)
    records = []
    for gpu in order:
        record: dict[str, str] = {"GPU": gpu.name + (" (selected)" if gpu.name == selected else "")}
        for row in estimate.rows:
            cell = verdict(row, estimate.mode, gpu)
            fit = row.fit if gpu.name == selected else None
            if fit and fit.get("max_batch_size") is not None:
                cell += f"; batch up to {fit['max_batch_size']:,}"
            if fit and fit.get("max_seq_len") is not None:
                cell += f"; context up to {fit['max_seq_len']:,}"
            record[str(row.dtype)] = cell
        if speeds:
            record["Speed (roofline)"] = _speed_cell(estimate, gpu)
        record["Memory (driver)"] = format_bytes(gpu.total_bytes)
        record["Stated"] = gpu.stated
        records.append(record)
    return pd.DataFrame.from_records(records)


def _speed_cell(estimate: Estimate, gpu: GPU) -> str:
    """Each transformers row's speed on ``gpu`` from the per-op costs its simulation counted (no new simulation)."""
    from estimator.errors import BadOptionError
    from estimator.speed.hardware import find_hardware
    from estimator.speed.transformers_speed import speed_cell

    try:
        hardware = find_hardware(gpu.name)
    except BadOptionError:
        return "unknown"
    cells = [(str(row.dtype), speed_cell(row.speed_costs, hardware)) for row in estimate.rows if row.speed_costs is not None]
    return "; ".join(cell if len(cells) == 1 else f"{dtype} {cell}" for dtype, cell in cells)


def fits_caption(mode: str, allocator: bool = True, gpu_chosen: bool = False) -> str:
    """What the verdicts count; ``allocator``: whether the rows carry the caching allocator's figures
    (a whole model simulated, as when a GPU is named; an extrapolated decoder has none); ``gpu_chosen``:
    a GPU was named, so the rows lack them because they are per GPU under a strategy (not modelled there)."""
    what = "the peak memory of the " + mode + " step" if mode != "load" else "the loaded weights and buffers"
    if mode == "load" or allocator:
        runtime = "context, cuBLAS workspaces" + ("" if mode == "load" else ", the caching allocator's rounding and cached blocks")
        text = f"Compares {what}, plus the CUDA runtime's own memory ({runtime}), with the memory each GPU's driver reports to PyTorch."
    else:
        text = (f"Compares {what}, plus the CUDA context and cuBLAS workspaces, with the memory each GPU's driver reports "
                "to PyTorch. The caching allocator's rounding and cached blocks are not counted here (the layers were "
                + ("simulated in part and extrapolated; the allocator is not modelled per GPU under a strategy)." if gpu_chosen
                   else "simulated in part and extrapolated): choose a GPU to have the allocator replayed over the whole "
                   "model's trace and count them."))
    if mode == "load":
        text += " Load mode counts no activations and no KV cache: running the model needs more."
    return text


def allocator_counted(estimate: Estimate) -> bool:
    """Whether every simulated row carries the caching allocator's figures."""
    return all("reserved_extra" in (row.runtime_overhead or {}) for row in estimate.rows if row.method == "simulated")
