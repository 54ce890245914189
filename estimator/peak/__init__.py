"""Peak memory of a real inference or training step, simulated on fake tensors.

Public entry: :func:`simulate_peak` returning a :class:`PeakResult`.
"""

from __future__ import annotations

from estimator.peak.components import Component
from estimator.peak.simulate import PeakResult, simulate_peak

__all__ = ["Component", "PeakResult", "simulate_peak"]
