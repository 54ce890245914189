"""``scaled_dot_product_attention`` as CUDA runs it, for fake CPU tensors.

Fake CUDA tensors cannot run on a machine without a GPU, so the CUDA target runs on CPU fakes;
but CPU's SDPA picks its kernels by CPU rules. Inside :func:`cuda_sdpa`,
``torch.nn.functional.scaled_dot_product_attention`` is replaced by a stand-in that picks the
backend by CUDA's rules (PyTorch ``aten/src/ATen/native/transformers/cuda/sdp_utils.cpp``, default
priority flash > memory-efficient > math; cuDNN attention is not chosen by default) and allocates
what that backend allocates through the caching allocator:

- **flash** (no explicit mask, fp16/bf16, head dim <= 256, equal q/k/v head dims; GQA supported):
  output in the input dtype and a logsumexp of (B, H, L) fp32, both saved for backward. Backward
  (FlashAttention-2 ``mha_bwd``): dq, dk, dv; a (B, H, L rounded to 128) fp32 ``softmax_d``; a
  (B, L rounded to 128, H, D rounded to 8) fp32 ``dq_accum``; with GQA, dk/dv expanded to the query
  heads before the sum.
- **memory-efficient** (fp32/fp16/bf16, explicit masks allowed, *no* GQA): output and a logsumexp
  of (B, H, L rounded to 32) fp32; a boolean mask becomes an additive mask in the query dtype, saved
  for backward. Backward: dq, dk, dv, a (B, H, L) fp32 ``delta`` and, for 16-bit inputs, a
  (B, H, L, D) fp32 dq accumulator.
- **math** otherwise (e.g. fp32 with GQA and no mask, or any unsupported shape): PyTorch's own
  ``_scaled_dot_product_attention_math``, which materialises the attention matrix.

Not modelled: dropout RNG state (a few bytes), nested tensors, cuDNN attention.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F

__all__ = ["Backend", "choose_backend", "cuda_sdpa"]

Backend = str  # "flash" | "efficient" | "math"

_LOW = (torch.float16, torch.bfloat16)


def _round(x: int, m: int) -> int:
    return (x + m - 1) // m * m


def choose_backend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: Any,
                   enable_gqa: bool) -> Backend:
    """The backend CUDA's dispatcher picks for these inputs (see the module docstring)."""
    dense = q.dim() == 4 and k.dim() == 4 and v.dim() == 4
    same_dims = q.shape[-1] == k.shape[-1] == v.shape[-1]
    gqa = dense and q.shape[1] != k.shape[1]
    if gqa and not enable_gqa:
        return "math"  # shapes PyTorch would reject or broadcast; leave to the math path
    if dense and not q.shape[0] == k.shape[0] == v.shape[0]:
        return "math"  # a broadcast batch (Granite Speech's Q-Former queries): sdp_utils' same-batch check of the fused kernels
    if dense and same_dims and attn_mask is None and q.dtype in _LOW and q.shape[-1] <= 256:
        return "flash"
    if dense and not gqa and q.dtype in (torch.float32, *_LOW) and q.shape[-1] % 8 == 0:
        return "efficient"
    return "math"


class FusedAttention(torch.autograd.Function):
    """Allocates exactly what the fused CUDA kernels allocate; the values are irrelevant."""

    @staticmethod
    def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: Any,
                backend: str) -> torch.Tensor:
        b, h, n, _ = q.shape
        out = torch.empty(b, n, h, v.shape[-1], dtype=q.dtype).transpose(1, 2)
        lse_len = n if backend == "flash" else _round(n, 32)
        lse = torch.empty(b, h, lse_len, dtype=torch.float32)
        ctx.backend = backend
        ctx.has_bias = bias is not None
        tensors = (q, k, v, out, lse) + ((bias,) if bias is not None else ())
        ctx.save_for_backward(*tensors)
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> Any:
        q, k, v, _out, _lse = ctx.saved_tensors[:5]
        b, h, n, d = q.shape
        hk, s = k.shape[1], k.shape[2]
        dq = torch.empty(b, n, h, d, dtype=q.dtype).transpose(1, 2)
        if ctx.backend == "flash":
            softmax_d = torch.empty(b, h, _round(n, 128), dtype=torch.float32)
            dq_accum = torch.empty(b, _round(n, 128), h, _round(d, 8), dtype=torch.float32)
            if hk != h:
                dk_exp = torch.empty(b, s, h, d, dtype=k.dtype)
                dv_exp = torch.empty(b, s, h, v.shape[-1], dtype=v.dtype)
                dk = dk_exp.view(b, s, hk, h // hk, d).sum(3).transpose(1, 2)
                dv = dv_exp.view(b, s, hk, h // hk, v.shape[-1]).sum(3).transpose(1, 2)
                del dk_exp, dv_exp
            else:
                dk = torch.empty(b, s, hk, d, dtype=k.dtype).transpose(1, 2)
                dv = torch.empty(b, s, hk, v.shape[-1], dtype=v.dtype).transpose(1, 2)
            del softmax_d, dq_accum
        else:
            delta = torch.empty(b, h, n, dtype=torch.float32)
            acc = torch.empty(b, h, n, d, dtype=torch.float32) if q.dtype in _LOW else None
            dk = torch.empty(b, s, hk, d, dtype=k.dtype).transpose(1, 2)
            dv = torch.empty(b, s, hk, v.shape[-1], dtype=v.dtype).transpose(1, 2)
            del delta, acc
        return dq, dk, dv, None, None


def _sdpa(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: Any = None,
          dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
          enable_gqa: bool = False) -> torch.Tensor:
    backend = choose_backend(query, key, value, attn_mask, enable_gqa)
    if backend == "math":
        return torch.ops.aten._scaled_dot_product_attention_math(
            query, key, value, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa
        )[0]
    bias = None
    if attn_mask is not None:
        # bool masks become additive masks in the query dtype; the last dim is padded to 16
        shape = list(attn_mask.shape)
        pad = _round(shape[-1], 16)
        bias = torch.empty(*shape[:-1], pad, dtype=query.dtype)[..., : shape[-1]]
    return FusedAttention.apply(query, key, value, bias, backend)


@contextlib.contextmanager
def cuda_sdpa() -> Iterator[None]:
    """Route ``F.scaled_dot_product_attention`` through the CUDA-rules stand-in meanwhile."""
    original = F.scaled_dot_product_attention
    F.scaled_dot_product_attention = _sdpa
    try:
        yield
    finally:
        F.scaled_dot_product_attention = original


