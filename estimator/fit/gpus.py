"""Common GPUs, their memory in bytes, and the "fits on" table.

Capacities are the vendor's stated figure ("16 GB"), converted to bytes the way memory is built:
GPU memory (GDDR6, GDDR6X, HBM2e, HBM3, HBM3e) comes in power-of-two chip and stack sizes, and the
"GB" on a GPU data sheet is the JEDEC binary gigabyte, 1024**3 bytes. The H200 is the check: its
141 GB is what CUDA reports (about 140 GiB usable of six 24 GiB HBM3e stacks); read as 141 * 10**9
it would be 131 GiB, less than the card shows. The driver keeps a few hundred MiB more than that
on some cards (ECC, reserved pages); we do not subtract that, because it was not measured here.

Usable share: capacity minus :data:`CUDA_CONTEXT_BYTES`, the memory the CUDA context and
PyTorch's kernels take before the first tensor. With lazy module loading (CUDA >= 11.7, PyTorch's
default since 2.0: https://pytorch.org/docs/stable/notes/cuda.html, "CUDA_MODULE_LOADING") this is
a few hundred MiB; the Transformers guide "Model training anatomy"
(https://huggingface.co/docs/transformers/model_memory_anatomy) measured 1.3 GB with eager loading.
We assume 512 MiB unless a row measured its own ``runtime_overhead["cuda_context"]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from estimator.units import format_bytes

if TYPE_CHECKING:
    import pandas as pd

    from estimator.result import Estimate, Row

GiB = 1024**3
MiB = 1024**2
CUDA_CONTEXT_BYTES = 512 * MiB
CUDA_CONTEXT_SOURCE = (
    "512 MiB assumed for the CUDA context and kernels (PyTorch 2 with lazy module loading; "
    "the Transformers 'Model training anatomy' guide measured 1.3 GB with eager loading)"
)


@dataclass(frozen=True)
class GPU:
    """One GPU model: its stated memory, the bytes we take that to mean, and where it is stated."""

    name: str
    stated: str
    capacity_bytes: int
    source: str

    @property
    def usable_bytes(self) -> int:
        return self.capacity_bytes - CUDA_CONTEXT_BYTES


GPUS: tuple[GPU, ...] = (
    GPU("T4", "16 GB GDDR6", 16 * GiB, "NVIDIA T4 Tensor Core GPU data sheet"),
    GPU("L4", "24 GB GDDR6", 24 * GiB, "NVIDIA L4 Tensor Core GPU data sheet"),
    GPU("A10G", "24 GB GDDR6", 24 * GiB, "AWS EC2 G5 instances (NVIDIA A10G), instance type table"),
    GPU("RTX 4090", "24 GB GDDR6X", 24 * GiB, "NVIDIA GeForce RTX 4090 specifications"),
    GPU("A100 40GB", "40 GB HBM2", 40 * GiB, "NVIDIA A100 Tensor Core GPU data sheet"),
    GPU("A100 80GB", "80 GB HBM2e", 80 * GiB, "NVIDIA A100 Tensor Core GPU data sheet"),
    GPU("H100 80GB", "80 GB HBM3", 80 * GiB, "NVIDIA H100 Tensor Core GPU data sheet (SXM5 and PCIe)"),
    GPU("H200", "141 GB HBM3e", 141 * GiB, "NVIDIA H200 Tensor Core GPU data sheet"),
)
GPU_NAMES: tuple[str, ...] = tuple(g.name for g in GPUS)


def needed_bytes(row: Row, mode: str) -> int | None:
    """What must fit: the peak in inference/training mode, else the loaded weights (``None``: unknown)."""
    return row.peak_bytes if mode != "load" else row.total_bytes


def context_bytes(row: Row) -> int:
    """The row's own measured CUDA context where it has one, else :data:`CUDA_CONTEXT_BYTES`."""
    if row.runtime_overhead and "cuda_context" in row.runtime_overhead:
        return row.runtime_overhead["cuda_context"]
    return CUDA_CONTEXT_BYTES


def verdict(row: Row, mode: str, gpu: GPU) -> str:
    """One cell: "fits (x free)", "does not fit (x short)" or "unknown"."""
    needed = needed_bytes(row, mode)
    if needed is None:
        return "unknown"
    usable = gpu.capacity_bytes - context_bytes(row)
    if needed <= usable:
        return f"fits ({format_bytes(usable - needed)} free)"
    return f"does not fit ({format_bytes(needed - usable)} short)"


def fits_frame(estimate: Estimate, selected: str | None = None) -> pd.DataFrame:
    """One line per GPU (the ``selected`` one first): capacity, usable share, and a verdict per dtype row."""
    import pandas as pd

    order = sorted(GPUS, key=lambda g: g.name != selected) if selected else list(GPUS)
    records = []
    for gpu in order:
        record = {
            "GPU": gpu.name + (" (selected)" if gpu.name == selected else ""),
            "Memory (stated)": gpu.stated,
            "Usable": format_bytes(gpu.usable_bytes),
        }
        for row in estimate.rows:
            record[row.dtype] = verdict(row, estimate.mode, gpu)
        records.append(record)
    return pd.DataFrame.from_records(records)


def fits_caption(mode: str) -> str:
    what = "the peak memory of the " + mode + " step" if mode != "load" else "the loaded weights and buffers"
    text = f"Compares {what} with each GPU's usable memory: the vendor's stated capacity (binary GB) minus {CUDA_CONTEXT_SOURCE}."
    if mode == "load":
        text += " Load mode counts no activations and no KV cache: running the model needs more."
    return text
