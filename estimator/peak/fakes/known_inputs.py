"""Input tensors of one value everywhere whose values the known-values mode knows (:mod:`estimator.peak.fakes.known_values`),
shared by the input providers."""

from __future__ import annotations

import torch

from estimator.peak.fakes.known_values import know

__all__ = ["known"]


def known(shape: tuple[int, ...], value: int | bool, dtype: torch.dtype = torch.long) -> torch.Tensor:
    """A tensor of ``value`` everywhere (a fake inside a fake mode, whose values
    :class:`~estimator.peak.fakes.known_values.KnownValues` knows; outside one: the real tensor)."""
    from torch.utils._python_dispatch import _disable_current_modes

    t = torch.full(shape, value, dtype=dtype)
    if not isinstance(t, torch._subclasses.fake_tensor.FakeTensor):
        return t
    with _disable_current_modes():
        real = torch.full(shape, value, dtype=dtype, device="cpu")
    return know(t, real)
