"""Stand-ins for ops whose fake (meta) kernel is stricter than the real kernel.

Each stand-in returns outputs with the shapes, dtypes and strides the real kernel returns; it runs
below the tracker, so whatever it allocates to find them is not counted.

- ``aten._grouped_mm``: the meta kernel accepts only bf16/fp16 (the CUDA kernels' limits) while
  the CPU kernel also runs fp32 (transformers' MoE ``grouped_mm`` experts use it on CPU). The
  stand-in runs the meta kernel on bf16 copies and returns an empty tensor of the real dtype.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["OVERRIDES"]


def _grouped_mm(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    a, b = args[0], args[1]
    if a.dtype in (torch.bfloat16, torch.float16) and b.dtype == a.dtype:
        return func(*args, **kwargs)
    out_dtype = kwargs.get("out_dtype") or a.dtype
    low = (a.to(torch.bfloat16), b.to(torch.bfloat16), *args[2:])
    kw = dict(kwargs)
    kw.pop("out_dtype", None)
    bias = kw.get("bias")
    if bias is not None:
        kw["bias"] = bias.to(torch.bfloat16)
    ref = func(*low, **kw)
    return torch.empty_strided(ref.size(), ref.stride(), dtype=out_dtype, device=ref.device)


OVERRIDES: dict[Any, Callable[[Any, tuple[Any, ...], dict[str, Any]], Any]] = {
    torch.ops.aten._grouped_mm.default: _grouped_mm,
}
