"""A row's simulated step with the per-op cost of each phase, in one pass: what the speed answers start from.

``estimator/peak/rows.py`` cannot import this stage (imports go one way, docs/ARCHITECTURE.md); it takes the
counter as ``simulate_row(..., observe=trace.observe)``, and this module makes the call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from estimator.options import Device, DType, Mode
from estimator.speed.cost import Phase, PhaseCost
from estimator.speed.trace import CostTrace, TraceError

if TYPE_CHECKING:
    from estimator.options import HardwareSpec, LoadSpec, WorkSpec
    from estimator.peak.engine import PeakResult
    from estimator.source.resolve import Resolved

__all__ = ["phase_tokens", "simulate_row_with_costs"]


def phase_tokens(work: WorkSpec) -> dict[Phase, int]:
    """The tokens each phase processes for ``work``: the prompts (batch x text length) for a prefill, a forward
    and each part of a training step; the batch for one decode step."""
    shape = work.shape
    prompt = shape.batch_size * shape.text_len
    return {Phase.PREFILL: prompt, Phase.FORWARD: prompt, Phase.DECODE: shape.batch_size,
            Phase.TRAIN_FORWARD: prompt, Phase.BACKWARD: prompt, Phase.OPTIMIZER: prompt}


def simulate_row_with_costs(resolved: Resolved, load: LoadSpec, work: WorkSpec, hardware: HardwareSpec,
                            dtype: DType) -> tuple[PeakResult, dict[Phase, PhaseCost]]:
    """:func:`estimator.peak.rows.simulate_row` for one dtype row, with the per-op cost of each phase of its step
    (:class:`~estimator.speed.trace.CostTrace`); raises :class:`~estimator.speed.trace.TraceError` where the step
    was not simulated (a formula stood in). Decode costs need ``work.shape.max_new_tokens >= 1``: the step is
    then the last one, at a cache of ``text_len + max_new_tokens - 1`` positions."""
    from estimator.peak.rows import simulate_row

    device = "cpu" if hardware.device is Device.CPU else "cuda"
    layers = resolved.config.get("num_hidden_layers")
    trace = CostTrace(layers=layers if isinstance(layers, int) else None, device=device)
    result = simulate_row(resolved, load, work, hardware, dtype, observe=trace.observe)
    if result.method != "simulated":
        raise TraceError("the step was not simulated (a formula stood in for it): no per-op costs")
    tokens = phase_tokens(work)
    if work.mode is Mode.TRAINING:
        tokens = {p: n for p, n in tokens.items() if p in (Phase.TRAIN_FORWARD, Phase.BACKWARD, Phase.OPTIMIZER)}
    return result, trace.phase_costs(tokens)
