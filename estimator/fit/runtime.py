"""What a CUDA process holds besides its tensors, per GPU: ``runtime_overhead``.

Keys (the contract's): ``allocator_rounding`` and ``reserved_extra`` come from the simulation —
PyTorch's caching allocator replayed over the simulated allocations
(:mod:`estimator.peak.kernels.cuda.allocator`); ``cuda_context`` and ``cublas_workspace`` are added here
for the GPU asked about. None of it is inside ``peak_bytes``; all of it comes out of the GPU's
``total_bytes``.

- ``cuda_context``: 426 MiB, measured with PyTorch 2.10 + CUDA 13.0 on an RTX 6000 Ada: the
  process's memory in ``nvidia-smi`` after ``torch.cuda.mem_get_info()`` created the context, no
  tensor allocated (https://github.com/unslothai/unsloth-zoo/pull/1053). CUDA loads kernel modules
  lazily (``CUDA_MODULE_LOADING=LAZY``, PyTorch's default), so the modules the model's kernels
  live in add to it as they are first used; PyTorch's maintainers quote 300-400 MB
  (https://github.com/pytorch/pytorch/issues/107667, /109888). Not measured in this repository
  (no GPU was available); the figure differs somewhat by GPU and driver.
- ``cublas_workspace``: PyTorch gives each cuBLAS handle a workspace from the caching allocator
  (``getNewWorkspace`` in ``aten/src/ATen/cuda/CublasHandlePool.cpp``) of
  ``CUBLAS_WORKSPACE_CONFIG``'s default — ``:4096:8`` (32 MiB) on compute capability 9.0 (Hopper),
  else ``:4096:2:16:8`` (4096 KiB x 2 + 16 KiB x 8 = 8,519,680 bytes); cuBLASLt shares it (the
  unified workspace, PyTorch's default). Handles are per thread: inference uses one (the main
  thread); training a second, autograd's backward thread.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from estimator.fit.gpus import GPU
    from estimator.result import Row

__all__ = ["CUDA_CONTEXT_BYTES", "cublas_workspace_bytes", "needed_bytes", "runtime_overhead", "unverified_note"]

MiB = 1024**2
CUDA_CONTEXT_BYTES = 426 * MiB
CUBLAS_HOPPER = 4096 * 1024 * 8
CUBLAS_DEFAULT = 4096 * 1024 * 2 + 16 * 1024 * 8


def cublas_workspace_bytes(gpu: GPU | None, mode: str) -> int:
    """The cuBLAS workspaces of a step in ``mode`` on ``gpu`` (none in load mode: no matmul runs)."""
    if mode == "load":
        return 0
    per_handle = CUBLAS_HOPPER if gpu is not None and gpu.compute_capability == "9.0" else CUBLAS_DEFAULT
    return per_handle * (2 if mode == "training" else 1)


def runtime_overhead(row: Row, mode: str, gpu: GPU | None) -> dict[str, int]:
    """The row's allocator overheads (from its simulation) plus the context and cuBLAS for ``gpu``."""
    simulated = {k: v for k, v in (row.runtime_overhead or {}).items() if k in ("allocator_rounding", "reserved_extra")}
    return {**simulated, "cuda_context": CUDA_CONTEXT_BYTES, "cublas_workspace": cublas_workspace_bytes(gpu, mode)}


def needed_bytes(row: Row, mode: str, gpu: GPU | None) -> int | None:
    """What must fit in the GPU's ``total_bytes``: the peak (load mode: the weights) plus the runtime overhead."""
    base = row.total_bytes if mode == "load" else row.peak_bytes
    if base is None:
        return None
    return base + sum(runtime_overhead(row, mode, gpu).values())


_SOURCES = {
    "cuda_context": "cuda_context: a published measurement (PyTorch 2.10, CUDA 13.0, RTX 6000 Ada)",
    "cublas_workspace": "cublas_workspace: PyTorch's rule",
    "allocator_rounding": "allocator_rounding and reserved_extra: PyTorch's caching allocator's rules replayed over the simulation",
}


def unverified_note(overhead: dict[str, int]) -> str:
    """The row note saying where each runtime figure comes from: none is measured on a GPU here yet."""
    said = [text for key, text in _SOURCES.items() if overhead.get(key) is not None and (overhead[key] or key != "cublas_workspace")]
    return "runtime_overhead not measured on a GPU (none was available to this project yet; docs/fit.md): " + "; ".join(said)
