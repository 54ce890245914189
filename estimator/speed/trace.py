"""Per-op cost of each phase, counted in the same pass as the memory simulation.

:class:`CostTrace` follows the simulation of :func:`estimator.peak.simulate_peak` through its
``observe`` hook: every op the step's :class:`~estimator.peak.sim.tracker.StorageTracker` sees is turned
into an :class:`~estimator.speed.cost.OpCost` (:func:`estimator.speed.op_cost.op_cost`) under the
phase the step is in (``prefill``, ``decode``, ``forward``, ``train_forward``, ``backward``,
``optimizer``; ops between phases, such as training's first step that only creates the optimizer
states, or the untracked prefill that fills the cache before the decode step, are not counted). On
``device="cuda"`` the fused attention kernels are recorded as one op each
(:mod:`estimator.speed.fused_attention`). Nothing is simulated a second time::

    trace = CostTrace(model)                    # before simulate_peak consumes the meta model
    result = simulate_peak(model, mode="inference", max_new_tokens=1, observe=trace.observe)
    costs = trace.phase_costs()                 # {Phase.PREFILL: PhaseCost, Phase.DECODE: PhaseCost}

Where the engine extrapolates alike decoder layers (it simulates 2, 3 and 4 layers,
:mod:`estimator.peak.sim.layers`), the costs are extrapolated the same way: the ops of one layer are
those the 4-layer sample has beyond the 3-layer one, checked equal to what the 3-layer sample has
beyond the 2-layer one (as multisets of ops), and added ``N - 4`` times; a phase whose samples run the
same ops in the same order (a ``foreach`` optimizer: one call over every layer's tensors) has each op's
FLOPs and bytes extrapolated, checked linear the same way. A simulation that is
retried (training's second attempt without the unreached parameters' states) keeps its last attempt.

The decode step is the last one ``generate`` runs: one token per sequence against a cache of
``seq_len + max_new_tokens - 1`` positions (:func:`decode_context`).
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from torch import nn

from estimator.speed.cost import OpCost, Phase, PhaseCost
from estimator.speed.op_cost import op_cost

if TYPE_CHECKING:
    from estimator.peak.engine import PeakResult
    from estimator.peak.sim.tracker import StorageTracker
    from estimator.peak.sim.training import Recipe

__all__ = ["CostTrace", "TraceError", "decode_context", "phase_costs_for"]


class TraceError(RuntimeError):
    """The simulation gave no per-op costs for the whole model (it fell back to a formula, its layer
    samples were not linear in their ops, or an op's cost could not be counted: the memory result stands)."""


def decode_context(seq_len: int, max_new_tokens: int) -> int:
    """The positions already in the cache when the last decode step runs (that step adds one)."""
    return seq_len + max_new_tokens - 1


@dataclass
class _Run:
    """The ops of one simulated model's step, per phase."""

    layers: int | None
    ops: dict[str, list[OpCost]] = field(default_factory=dict)
    complete: bool = False
    error: str | None = None  # the op whose cost could not be counted


def _layers(model: nn.Module) -> int | None:
    config = getattr(model, "config", None)
    n = getattr(config, "num_hidden_layers", None)
    if n is None:  # a peft model: the base model's config
        n = getattr(getattr(getattr(model, "base_model", None), "config", None), "num_hidden_layers", None)
    return n if isinstance(n, int) else None


class CostTrace:
    """The per-op cost counter of one simulation (see the module docstring). ``model``: the meta model
    about to be simulated, or ``layers``: its ``config.num_hidden_layers`` (what costs are extrapolated to
    where the engine simulates layer samples; ``resolved.config.get("num_hidden_layers")`` for a row);
    ``device``: the simulation's device (``"cuda"`` records the fused attention kernels)."""

    def __init__(self, model: nn.Module | None = None, *, layers: int | None = None, device: str = "cuda") -> None:
        self.layers = _layers(model) if model is not None else layers if isinstance(layers, int) else None
        self.device = device
        self._runs: list[_Run] = []

    # -- the hook simulate_peak calls ----------------------------------------------------------
    def observe(self, model: nn.Module) -> Callable[[StorageTracker], contextlib.AbstractContextManager[Any]]:
        """``simulate_peak``'s ``observe``: one run per model simulated; each attempt replaces the last."""
        run = _Run(_layers(model))
        self._runs.append(run)

        @contextlib.contextmanager
        def on_tracker(tracker: StorageTracker) -> Iterator[None]:
            run.ops, run.complete, run.error = {}, False, None
            current: list[str | None] = [None]

            def phase_ops(phase: str | None) -> list[OpCost] | None:
                if phase != current[0]:
                    current[0] = phase
                    if phase is not None:
                        run.ops[phase] = []  # a phase entered again (training's measured step) starts afresh
                return None if phase is None else run.ops[phase]

            def on_op(phase: str | None, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
                ops = phase_ops(phase)
                if ops is None or run.error is not None:
                    return
                try:
                    cost = op_cost(func, args, kwargs, out)
                except Exception as exc:  # noqa: BLE001 - a count that fails must not fail the memory simulation
                    run.error = f"{func}: {type(exc).__name__}: {exc}"
                    return
                if cost is not None:
                    ops.append(cost)

            def record(cost: OpCost) -> None:
                ops = phase_ops(tracker.phase)
                if ops is not None:
                    ops.append(cost)

            tracker.on_op = on_op
            fused: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
            if self.device == "cuda":
                from estimator.speed.fused_attention import fused_attention_counted

                fused = fused_attention_counted(record)
            try:
                with fused:
                    yield
                run.complete = True
            finally:
                tracker.on_op = None

        return on_tracker

    # -- results -------------------------------------------------------------------------------
    def phase_costs(self, tokens: dict[Phase, int] | None = None) -> dict[Phase, PhaseCost]:
        """The cost of each phase simulated, for the whole model. ``tokens``: what each phase processes
        (:class:`~estimator.speed.cost.PhaseCost.tokens`; 0 where not given). Raises :class:`TraceError`
        where the simulation gave no per-op costs for the whole model."""
        runs = [r for r in self._runs if r.complete]
        if not runs:
            raise TraceError("the step was not simulated (a formula stood in for it): no per-op costs")
        failed = next((r.error for r in runs if r.error is not None), None)
        if failed is not None:
            raise TraceError(f"an op's cost could not be counted ({failed})")
        last = runs[-1]
        if last.layers == self.layers or self.layers is None or last.layers is None:
            ops = {name: list(v) for name, v in last.ops.items()}
        else:
            ops = self._extrapolated(runs[-3:])
        tokens = tokens or {}
        return {Phase(name): PhaseCost(Phase(name), tuple(v), tokens.get(Phase(name), 0)) for name, v in ops.items()}

    def _extrapolated(self, samples: list[_Run]) -> dict[str, list[OpCost]]:
        from estimator.peak.sim.layers import SAMPLE_LAYERS

        if len(samples) != 3 or tuple(r.layers for r in samples) != SAMPLE_LAYERS or self.layers is None:
            raise TraceError(f"the simulated models ({[r.layers for r in self._runs]} layers) are neither the whole "
                             f"model ({self.layers} layers) nor the layer samples {SAMPLE_LAYERS}")
        s2, s3, s4 = samples
        if not set(s2.ops) == set(s3.ops) == set(s4.ops):
            raise TraceError("the layer samples ran different phases")
        more = self.layers - SAMPLE_LAYERS[-1]
        result = {}
        for name in s4.ops:
            o2, o3, o4 = s2.ops[name], s3.ops[name], s4.ops[name]
            if [o.name for o in o2] == [o.name for o in o3] == [o.name for o in o4]:
                result[name] = [_grown(a, b, c, more, name) for a, b, c in zip(o2, o3, o4, strict=True)]
                continue
            c2, c3, c4 = Counter(o2), Counter(o3), Counter(o4)
            layer = c4 - c3
            if layer != c3 - c2 or c3 - c4 or c2 - c3:
                raise TraceError(f"phase {name}: the ops of the layer samples are not linear in the layers")
            result[name] = list(o4) + list(layer.elements()) * more
        return result


def _grown(o2: OpCost, o3: OpCost, o4: OpCost, more: int, phase: str) -> OpCost:
    """One op over every layer's tensors (a ``foreach`` optimizer op: one call whatever the layer count), its
    FLOPs and bytes extrapolated ``more`` layers past the 4-layer sample; they must grow linearly."""
    fields = ("flops", "bytes_read", "bytes_written")
    values = {}
    for f in fields:
        a, b, c = getattr(o2, f), getattr(o3, f), getattr(o4, f)
        if c - b != b - a:
            raise TraceError(f"phase {phase}: {o4.name}'s {f} is not linear in the layers")
        values[f] = c + more * (c - b)
    return replace(o4, **values)


def phase_costs_for(
    model: nn.Module, *, mode: str = "inference", device: str = "cuda", batch_size: int = 1, seq_len: int = 512,
    max_new_tokens: int = 0, recipe: Recipe | None = None, extrapolate_layers: bool = True,
) -> tuple[PeakResult, dict[Phase, PhaseCost]]:
    """Simulate ``model`` (built on meta; consumed) once with :func:`estimator.peak.simulate_peak` and return its
    memory result with the per-op cost of each phase: inference gives ``PREFILL`` (the prompt of ``seq_len``
    tokens; ``FORWARD`` for a model that does not generate) and, with ``max_new_tokens``, ``DECODE`` (the last
    step, at a cache of :func:`decode_context` positions); training gives ``TRAIN_FORWARD``, ``BACKWARD`` and
    ``OPTIMIZER`` (``recipe``: :class:`~estimator.peak.sim.training.Recipe`)."""
    from estimator.peak import simulate_peak

    trace = CostTrace(model, device=device)
    result = simulate_peak(model, mode=mode, device=device, batch_size=batch_size, seq_len=seq_len,  # type: ignore[arg-type]  # checked by simulate_peak
                           max_new_tokens=max_new_tokens, recipe=recipe, extrapolate_layers=extrapolate_layers,
                           observe=trace.observe)
    if result.method != "simulated":
        raise TraceError("the step was not simulated (a formula stood in for it): no per-op costs")
    prompt = batch_size * seq_len
    tokens = {Phase.PREFILL: prompt, Phase.FORWARD: prompt, Phase.DECODE: batch_size, Phase.TRAIN_FORWARD: prompt,
              Phase.BACKWARD: prompt, Phase.OPTIMIZER: prompt}
    return result, trace.phase_costs(tokens)
