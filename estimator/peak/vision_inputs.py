"""Workloads of vision models and vision towers asked alone whose inputs the generic image path does not make.

``workload(model, batch_size=, seq_len=, image_size=)`` returns a :class:`~estimator.peak.inputs.Workload`
for the models this module knows, else None (the generic paths of :mod:`estimator.peak.inputs` then run).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import nn

if TYPE_CHECKING:
    from estimator.peak.inputs import Workload

__all__ = ["workload"]


def workload(model: nn.Module, *, batch_size: int, seq_len: int, image_size: int | None) -> Workload | None:
    """None: no model is handled here yet."""
    return None
