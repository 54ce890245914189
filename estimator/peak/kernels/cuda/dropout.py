"""Dropout as CUDA runs it, for CPU fakes.

``torch.nn.functional.dropout`` takes ATen's fused kernel on CUDA tensors (``aten/src/ATen/native/
Dropout.cpp``, ``is_fused_kernel_acceptable``: CUDA, ``0 < p < 1``, a non-empty input):
``native_dropout`` returns the output and a **boolean** mask (1 byte per element) that backward
keeps. On CPU tensors the same call takes the unfused path: a mask drawn with ``bernoulli_`` in the
*input's* dtype (4 bytes per element in float32), scaled, then multiplied. The fakes are CPU
tensors, so on ``device="cuda"`` :func:`cuda_dropout` routes training-mode ``F.dropout`` to
``torch.native_dropout`` as the CUDA dispatcher would. Found by comparing the forward of GPT-2 on
fake CUDA tensors (which dispatch as CUDA does) with the CPU fakes: dropout was the only difference.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

__all__ = ["cuda_dropout"]


class _FusedDropout(TorchFunctionMode):
    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func is F.dropout:
            names = ("input", "p", "training", "inplace")
            bound = {**dict(zip(names, args, strict=False)), **kwargs}
            x, p = bound["input"], bound.get("p", 0.5)
            if bound.get("training", True) and 0 < p < 1 and x.numel() > 0:
                out = torch.native_dropout(x, p, True)[0]
                return x.copy_(out) if bound.get("inplace", False) else out
        return func(*args, **kwargs)


@contextlib.contextmanager
def cuda_dropout() -> Iterator[None]:
    """Training-mode ``F.dropout`` as CUDA's fused kernel (see the module docstring) meanwhile."""
    with _FusedDropout():
        yield
