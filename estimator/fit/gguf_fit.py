"""A GGUF row against a GPU: llama.cpp's offload plan (:mod:`estimator.gguf.placement`) decides the verdict.

The GPU's room for llama.cpp is what its driver reports less the CUDA context (:data:`CUDA_CONTEXT_BYTES`), the
capacity the row's own offload note was computed with (``estimator.api.gpu_capacity``); llama.cpp allocates its
buffers with ``cudaMalloc`` (no PyTorch caching allocator, no PyTorch cuBLAS workspace), so nothing else is added.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from estimator.fit.runtime import CUDA_CONTEXT_BYTES
from estimator.gguf.placement import Answer, Plan, Verdict

if TYPE_CHECKING:
    from estimator.fit.gpus import GPU
    from estimator.result import Row

__all__ = ["answer", "with_gguf_fit"]


def answer(row: Row, gpu: GPU) -> Answer | None:
    """The row's verdict on ``gpu``; None for a row without a GGUF plan (not a GGUF inference row)."""
    plan = row.gguf_plan
    if not isinstance(plan, Plan):
        return None
    return plan.answer(gpu.total_bytes - CUDA_CONTEXT_BYTES)


def fit_dict(found: Answer, gpu: GPU) -> dict[str, Any]:
    """The contract's ``fit`` for a GGUF row: ``fits`` is true when llama.cpp runs it with this GPU (every layer
    or some of them on it), ``verdict`` says which, ``answer`` is the sentence the table and the CLI show."""
    needed = found.split.gpu_bytes + CUDA_CONTEXT_BYTES
    return {
        "gpu": gpu.name, "capacity_bytes": gpu.total_bytes, "needed_bytes": needed, "fits": found.verdict is not Verdict.NO,
        "headroom_bytes": gpu.total_bytes - needed, "max_batch_size": None, "max_seq_len": None, **found.to_dict(),
    }


def with_gguf_fit(rows: tuple[Row, ...], gpu: GPU) -> tuple[Row, ...]:
    """``rows`` with ``fit`` for ``gpu`` where they carry a GGUF plan (load rows carry none and are left as they are)."""
    out = []
    for row in rows:
        found = answer(row, gpu)
        out.append(row if found is None else replace(row, fit=fit_dict(found, gpu)))
    return tuple(out)
