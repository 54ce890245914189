"""CUDA's fused attention kernels as one op each in the cost trace.

On ``device="cuda"`` the simulation runs ``scaled_dot_product_attention`` through
:mod:`estimator.peak.kernels.cuda.sdpa`'s stand-in, which allocates what the flash / memory-efficient kernels
allocate but runs no aten op a counter could see as the kernel (its ``empty`` and ``transpose`` are
allocations and views). :func:`fused_attention_counted` wraps that stand-in for the duration of a
step and records the kernel itself:

- forward (``flash_attention_forward`` / ``efficient_attention_forward``): reads q, k, v (and the
  additive mask of the memory-efficient kernel), writes the output and the fp32 logsumexp; FLOPs by
  flop_counter's formula for ``aten._scaled_dot_product_flash_attention`` (the efficient kernel's
  formula is the same).
- backward (``..._backward``, training): reads the output's gradient, q, k, v, the output and the
  logsumexp, writes dq, dk, dv; FLOPs by flop_counter's ``sdpa_backward_flop_count``. Recorded by an
  identity autograd node on the output (a view: no storage, so the memory trace is unchanged).

The math backend (what CUDA falls back to) runs its own aten ops, which are counted as they run.
Kernel-internal buffers (flash's ``dq_accum``, the attention tiles in shared memory) are not device
traffic of the kernel's arguments and are not counted.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils import flop_counter

from estimator.peak.kernels.cuda.sdpa import choose_backend
from estimator.speed.cost import OpCost
from estimator.speed.op_cost import FLOP_COUNTER, addressed_bytes

__all__ = ["fused_attention_counted"]

Record = Callable[[OpCost], None]


def _lse_bytes(q: torch.Tensor, backend: str) -> int:
    b, h, n = q.shape[0], q.shape[1], q.shape[2]
    return b * h * (n if backend == "flash" else (n + 31) // 32 * 32) * 4


class _BackwardMark(torch.autograd.Function):
    """An identity on the attention's output whose backward records the fused backward kernel."""

    @staticmethod
    def forward(ctx: Any, out: torch.Tensor, record: Record, meta: dict[str, Any]) -> torch.Tensor:
        ctx.record, ctx.meta = record, meta
        return out.view_as(out)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        m = ctx.meta
        flops = flop_counter.sdpa_backward_flop_count(grad.shape, m["q_shape"], m["k_shape"], m["v_shape"])
        read = addressed_bytes(grad) + m["qkv_bytes"] + m["out_bytes"] + m["lse_bytes"] + m["mask_bytes"]
        ctx.record(OpCost(f"{m['backend']}_attention_backward", int(flops), read, m["qkv_bytes"], m["dtype"], FLOP_COUNTER))
        return grad, None, None


@contextlib.contextmanager
def fused_attention_counted(record: Record) -> Iterator[None]:
    """Record CUDA's fused attention kernels (see the module docstring) while the step runs; enter it inside
    :func:`estimator.peak.kernels.cuda.sdpa.cuda_sdpa` (it wraps the stand-in that puts in place)."""
    inner = F.scaled_dot_product_attention

    def counted(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: Any = None,
                dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
                enable_gqa: bool = False) -> torch.Tensor:
        out = inner(query, key, value, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)
        backend = choose_backend(query, key, value, attn_mask, enable_gqa)
        if backend == "math":
            return out  # its own aten ops were counted
        qkv = sum(addressed_bytes(t) for t in {id(t): t for t in (query, key, value)}.values())
        mask = addressed_bytes(attn_mask) if isinstance(attn_mask, torch.Tensor) and backend != "flash" else 0
        lse = _lse_bytes(query, backend)
        dtype = str(query.dtype).removeprefix("torch.")
        flops = flop_counter.sdpa_flop_count(query.shape, key.shape, value.shape)
        record(OpCost(f"{backend}_attention_forward", int(flops), qkv + mask, addressed_bytes(out) + lse, dtype, FLOP_COUNTER))
        if torch.is_grad_enabled() and out.requires_grad:
            meta = {"q_shape": query.shape, "k_shape": key.shape, "v_shape": value.shape, "qkv_bytes": qkv,
                    "out_bytes": addressed_bytes(out), "lse_bytes": lse, "mask_bytes": mask, "backend": backend,
                    "dtype": dtype}
            out = _BackwardMark.apply(out, record, meta)
        return out

    F.scaled_dot_product_attention = counted
    try:
        yield
    finally:
        F.scaled_dot_product_attention = inner
