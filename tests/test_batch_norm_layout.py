"""Batch norm's output layout under fake tensors (``estimator.peak.fakes.shims``: the batch-norm stand-in).

The CPU kernels allocate the normalised output and the backward's ``grad_input`` in the input's suggested memory
format (contiguous unless channels-last); the meta kernels keep a non-contiguous input's strides, and whether the
next op views or copies depends on it (PatchTST's transposed ``BatchNorm1d`` input). The truth is the real kernel.
"""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from estimator.peak.fakes.shims import OVERRIDES

A = torch.ops.aten
INPUTS = {
    "transposed 3-D": lambda: torch.randn(6, 8, 16).transpose(1, 2),
    "permuted 4-D": lambda: torch.randn(2, 5, 3, 4).permute(0, 2, 3, 1),
    "channels-last 4-D": lambda: torch.randn(2, 4, 5, 3).permute(0, 3, 1, 2),
    "transposed 2-D": lambda: torch.randn(16, 6).t(),
    "contiguous 3-D": lambda: torch.randn(6, 16, 8),
}


def _strides(x: torch.Tensor, make: object) -> list[tuple[int, ...]]:
    def call(op: object, *args: object) -> object:
        override = OVERRIDES.get(op)
        return op(*args) if override is None else override(op, args, {})  # type: ignore[operator]

    c = x.shape[1]
    w, b, rm, rv = (make(t) for t in (torch.ones(c), torch.zeros(c), torch.zeros(c), torch.ones(c)))  # type: ignore[operator]
    x = make(x)  # type: ignore[operator]
    out = call(A.native_batch_norm.default, x, w, b, rm, rv, True, 0.1, 1e-5)
    grads = [call(A.native_batch_norm_backward.default, g, x, w, rm, rv, out[1], out[2], True, 1e-5, [True] * 3)[0]  # type: ignore[index]
             for g in (torch.empty_like(x), torch.empty(x.shape, device=x.device))]
    return [t.stride() for t in (out[0], *grads,  # type: ignore[index]
                                 call(A._native_batch_norm_legit.default, x, w, b, rm, rv, True, 0.1, 1e-5)[0],  # type: ignore[index]
                                 call(A._native_batch_norm_legit.no_stats, x, w, b, True, 0.1, 1e-5)[0],  # type: ignore[index]
                                 call(A._native_batch_norm_legit_no_training.default, x, w, b, rm, rv, 0.1, 1e-5)[0])]  # type: ignore[index]


@pytest.mark.parametrize("name", list(INPUTS))
def test_fake_batch_norm_output_has_the_real_kernels_layout(name: str) -> None:
    x = INPUTS[name]()
    real = _strides(x, lambda t: t)
    with FakeTensorMode() as mode:
        fake = _strides(x, mode.from_tensor)
    assert fake == real
