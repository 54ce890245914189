"""Peak memory of a real inference or training step, simulated on fake tensors.

Public entries: :func:`simulate_peak` (Hub models) returning a :class:`PeakResult`, and the one
engine both it and :func:`estimator.modules.estimate.estimate_module` run, :func:`simulate_step`.
"""

from __future__ import annotations

from estimator.options import Component
from estimator.peak.engine import PeakResult, simulate_peak, simulate_step

__all__ = ["Component", "PeakResult", "simulate_peak", "simulate_step"]
