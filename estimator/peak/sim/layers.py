"""Repeated decoder layers: simulate a few, extrapolate to all of them, and check it is linear.

A decoder-only transformer whose layers are all alike adds the same bytes per layer to every
component at the peak instant (weights, gradients, optimizer states, saved activations, the KV
cache, the foreach optimizer's temporaries), as long as the peak stays at the same place of the
step. So the model is rebuilt on meta with ``k = 2, 3, 4`` layers (``type(model)._from_config``
on a copy of its config), each is simulated in full, and the peak of every phase of the step
(forward+backward and optimizer step; prefill and decode) is extrapolated on its own,
``r(4) + (N - 4) * (r(4) - r(3))`` per component; the step's peak is the largest extrapolated
phase. (Extrapolating only the overall peak would be wrong where the phase that peaks with few
layers grows more slowly than another.) It is used only when

- the config says the layers are alike (``layer_types`` absent or uniform, no known per-layer
  switches such as ``first_k_dense_replace`` or ``mlp_only_layers``), and
- in every phase the three samples are exactly linear (``r(4) - r(3) == r(3) - r(2)`` for the
  peak and every component, to the byte): anything that changes with the layer index or moves the peak shows up
  as a non-zero second difference, and the caller then simulates the full model.

``tests/test_peak_layers.py`` checks extrapolated against full simulations within 0.5%.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from estimator.peak.kernels.cuda.allocator import AllocatorPeaks, replay
from estimator.peak.sim.layer_trace import Periodicity, prove, whole_trace_from, whole_trace_from_one, written_from
from estimator.peak.sim.steps import StepPeak
from estimator.peak.sim.tracker import PeakSnapshot
from estimator.peak.workload import model_dtype

__all__ = ["SAMPLE_LAYERS", "extrapolate", "layer_count", "with_layers"]

logger = logging.getLogger(__name__)

SAMPLE_LAYERS = (2, 3, 4)

# Config keys that make some layers differ from others (dense vs MoE, cross-attention, ...).
_HETEROGENEOUS_KEYS = (
    "first_k_dense_replace",
    "mlp_only_layers",
    "decoder_sparse_step",
    "moe_layer_freq",
    "cross_attention_layers",
    "attn_layer_indices",
    "no_rope_layers",
    "moe_layer_start_index",
)


def layer_count(model: nn.Module) -> int | None:
    """The number of alike decoder layers, or ``None`` where extrapolation does not apply."""
    config = getattr(model, "config", None)
    if config is None or getattr(config, "is_encoder_decoder", False):
        return None
    n = getattr(config, "num_hidden_layers", None)
    if not isinstance(n, int) or n <= max(SAMPLE_LAYERS) + 1:
        return None
    layer_types = getattr(config, "layer_types", None)
    if layer_types is not None and len(set(layer_types)) > 1:
        return None
    for key in _HETEROGENEOUS_KEYS:
        if getattr(config, key, None) not in (None, 0, [], 1 if key == "decoder_sparse_step" else None):
            return None
    return n


def with_layers(model: nn.Module, k: int) -> nn.Module:
    """The same architecture with ``k`` layers, built on meta in the model's dtype."""
    config: Any = copy.deepcopy(model.config)
    config.num_hidden_layers = k
    if getattr(config, "layer_types", None) is not None:
        config.layer_types = list(config.layer_types)[:k]
    dtype = model_dtype(model)
    with torch.device("meta"):
        return type(model)._from_config(config, dtype=dtype)  # type: ignore[attr-defined]  # a PreTrainedModel class, typed as nn.Module here


def extrapolate(
    model: nn.Module, n_layers: int, simulate: Callable[[nn.Module], Any], sizes: tuple[int, int, int] = SAMPLE_LAYERS,
    *, allocator: bool = False, periodicity: Periodicity | None = None,
) -> tuple[dict[str, PeakSnapshot], tuple[str, ...], AllocatorPeaks | None, tuple[int, ...]] | None:
    """Per-phase peaks for ``n_layers``, notes, the CUDA caching allocator's peaks (with ``allocator``) and the
    layer counts simulated; ``None`` if some phase is not linear, or (with ``allocator``) the samples' traces are not periodic.

    ``simulate(model) -> (phases, notes[, overheads, events])`` runs the full simulation of a model, ``phases``
    mapping each phase of the step (forward+backward, optimizer step, prefill, decode) to its peak. The CUDA
    allocator's figures are not extrapolated (segment packing makes them jump with the layer count): with
    ``allocator``, the whole model's allocation trace is written from the samples' ``events``
    (:func:`~estimator.peak.sim.layer_trace.whole_trace`, exactly periodic or nothing) and the allocator replayed
    over it.
    Each phase is extrapolated on its own, so a phase that is smaller with few layers but grows
    faster (activations vs optimizer temporaries) still wins at ``n_layers``. ``sizes``: the three
    consecutive layer counts simulated (FSDP uses 3, 4, 5: with 2 blocks its peak sits elsewhere).
    """
    if allocator and periodicity is not None and periodicity.proofs:
        one = simulate(with_layers(model, sizes[1]))
        found = _from_one(one, sizes[1], n_layers, periodicity)
        if found is not None:
            return found
        two = [one, simulate(with_layers(model, sizes[2]))]
        found = _from_two(two, sizes, n_layers, periodicity)
        if found is not None:
            return found
        samples = [simulate(with_layers(model, sizes[0])), *two]
    else:
        samples = [simulate(with_layers(model, k)) for k in sizes]
    notes = samples[-1][1]
    names = set(samples[0][0])
    if any(set(s[0]) != names for s in samples):
        return None
    steps = n_layers - sizes[-1]
    result: dict[str, PeakSnapshot] = {}
    for name in names:
        s2, s3, s4 = (s[0][name] for s in samples)
        keys = set(s2.components) | set(s3.components) | set(s4.components)
        c2, c3, c4 = ({k: s.components.get(k, 0) for k in keys} for s in (s2, s3, s4))
        if s4.peak_bytes - s3.peak_bytes != s3.peak_bytes - s2.peak_bytes or any(
            c4[k] - c3[k] != c3[k] - c2[k] for k in keys
        ):
            logger.info("phase %s not linear in layers (%d, %d, %d): full simulation", name,
                        s2.peak_bytes, s3.peak_bytes, s4.peak_bytes)
            return None
        comps = {k: c4[k] + steps * (c4[k] - c3[k]) for k in keys}
        result[name] = PeakSnapshot(s4.peak_bytes + steps * (s4.peak_bytes - s3.peak_bytes),
                                    {k: v for k, v in comps.items() if v})
    if not allocator:
        return result, notes, None, tuple(sizes)
    traces = [s[3] for s in samples if len(s) > 3 and s[3] is not None]
    proof = prove(traces, sizes) if len(traces) == len(samples) and n_layers >= sizes[-1] else None
    if proof is None:
        logger.info("the layer samples' allocations are not periodic: full simulation")
        return None
    if periodicity is not None and proof not in periodicity.proofs:
        periodicity.proofs.append(proof)
    whole = written_from(proof, traces[-1], n_layers)
    if whole is None:
        return None
    return result, notes, replay(whole), tuple(sizes)


def _live_peak(events: list[tuple[int, int]]) -> int:
    """The most bytes live at once in a trace (allocations as requested, before the allocator's rounding)."""
    held: dict[int, int] = {}
    live = peak = 0
    for key, nbytes in events:
        if nbytes > 0:
            held[key] = nbytes
            live += nbytes
            peak = max(peak, live)
        elif nbytes < 0:
            live -= held.pop(key, 0)
    return peak


def _live_breakdown(events: list[tuple[int, int]], labels: list[str | None] | list[str]) -> PeakSnapshot:
    """The most bytes live at once in a trace and, at the first instant they are, the bytes of each label
    (``labels``: by event key), as the tracker's snapshot breaks a peak down."""
    held: dict[int, int] = {}
    live = peak = 0
    at_peak: dict[int, int] = {}
    for key, nbytes in events:
        if nbytes > 0:
            held[key] = nbytes
            live += nbytes
            if live > peak:
                peak, at_peak = live, dict(held)
        elif nbytes < 0:
            live -= held.pop(key, 0)
    components: dict[str, int] = {}
    for key, nbytes in at_peak.items():
        name = str(labels[key])
        components[name] = components.get(name, 0) + nbytes
    return PeakSnapshot(peak, components)


def _from_one(sample: Any, size: int, n_layers: int, periodicity: Periodicity,
              ) -> tuple[dict[str, PeakSnapshot], tuple[str, ...], AllocatorPeaks | None, tuple[int, ...]] | None:
    """One sample's answer (the proofs' top layer count less one) where one of ``periodicity``'s proofs writes it
    exactly (:func:`~estimator.peak.sim.layer_trace.whole_trace_from_one`), else ``None`` (the caller runs the top
    sample). The step's peak is the written whole trace's most live bytes and its breakdown what those bytes hold at
    the first instant they are live, and that is checked on the sample itself: its step's peak and breakdown must be
    its own trace's so (a peak that is not the trace's live bytes, a resize, a label changed after the peak, fall
    back). The answer holds the peak's phase only (the fit search reads the peak and the allocator's figures)."""
    if len(sample) < 5 or sample[3] is None or sample[4] is None:
        return None
    trace, labels = sample[3], sample[4]
    whole = next((w for w in (whole_trace_from_one(p, trace, size, n_layers, labels) for p in reversed(periodicity.proofs))
                  if w is not None), None)
    if whole is None:
        return None
    step = StepPeak(sample[0], ())
    own = _live_breakdown(trace, labels)
    if (own.peak_bytes, own.components) != (step.peak.peak_bytes, step.peak.components):
        logger.info("one layer sample: the step's peak is not the trace's most live bytes; the top sample is run")
        return None
    events, written = whole
    return {step.phase: _live_breakdown(events, written)}, sample[1], replay(events), (size,)


def _from_two(samples: list[Any], sizes: tuple[int, int, int], n_layers: int, periodicity: Periodicity,
              ) -> tuple[dict[str, PeakSnapshot], tuple[str, ...], AllocatorPeaks | None, tuple[int, ...]] | None:
    """The two upper samples' answer where one of ``periodicity``'s proofs (three samples of another shape of the same
    model and step) writes both exactly (:func:`~estimator.peak.sim.layer_trace.whole_trace_from`), else ``None``
    (the caller runs the third). Without the third sample the phases' linearity is not seen: the step's peak is
    instead checked against the written whole trace's own (each sample's peak must be its trace's most live
    bytes, and the extrapolated peak the whole trace's), so ``peak_bytes`` and the allocator's figures are the
    whole model's; the components are extrapolated from the two samples (the fit search reads the peak and the
    allocator's figures only)."""
    traces: list[list[tuple[int, int]]] = [s[3] for s in samples if len(s) > 3 and s[3] is not None]
    if len(traces) != len(samples) or any(set(s[0]) != set(samples[0][0]) for s in samples):
        return None
    # the latest proof first: the search's shapes move away from the row's
    whole = next((w for w in (whole_trace_from(p, traces, sizes[1:], n_layers) for p in reversed(periodicity.proofs))
                  if w is not None), None)
    if whole is None:
        return None
    steps = n_layers - sizes[-1]
    result: dict[str, PeakSnapshot] = {}
    for name in samples[0][0]:
        s3, s4 = (s[0][name] for s in samples)
        keys = set(s3.components) | set(s4.components)
        comps = {k: s4.components.get(k, 0) + steps * (s4.components.get(k, 0) - s3.components.get(k, 0)) for k in keys}
        result[name] = PeakSnapshot(s4.peak_bytes + steps * (s4.peak_bytes - s3.peak_bytes), {k: v for k, v in comps.items() if v})
    peaks = [StepPeak(s[0], ()).peak.peak_bytes for s in samples]
    if peaks != [_live_peak(t) for t in traces] or StepPeak(result, ()).peak.peak_bytes != _live_peak(whole):
        logger.info("two layer samples: the step's peak is not the trace's most live bytes; the third is run")
        return None
    return result, samples[-1][1], replay(whole), sizes[1:]


def extrapolated(
    model: nn.Module, simulate: Callable[[nn.Module], Any], sizes: tuple[int, int, int] = SAMPLE_LAYERS, *, min_layers: int = 1,
    allocator: bool = False, periodicity: Periodicity | None = None,
) -> tuple[dict[str, PeakSnapshot], tuple[str, ...], str, AllocatorPeaks | None] | None:
    """:func:`extrapolate` where it applies: the phases, the notes, a note saying how and (``allocator``) the
    caching allocator's peaks over the whole model's trace, or ``None`` where the model has no alike layers (or
    fewer than ``min_layers``), the samples are not exactly linear (or, with ``allocator``, their traces not
    periodic), or a sample could not be simulated; the caller then simulates the whole model, which reports any
    failure."""
    n_layers = layer_count(model)
    if n_layers is None or n_layers < min_layers:
        return None
    try:
        found = extrapolate(model, n_layers, simulate, sizes, allocator=allocator, periodicity=periodicity)
    except Exception:  # the whole-model simulation reports the failure
        logger.debug("layer extrapolation failed", exc_info=True)
        return None
    if found is None:
        return None
    phases, notes, peaks, used = found
    note = (f"{n_layers} alike layers: simulated with {used} layers, extrapolated (exactly linear)" if used == tuple(sizes) else
            f"{n_layers} alike layers: simulated with {used} layers, extrapolated (their traces written exactly by "
            f"the pieces and lifetimes that {sizes} layers showed at another shape of the same step)")
    if peaks is not None:
        note += ("; the caching allocator replayed over the whole model's allocations, written from the samples' "
                 "(exactly periodic in the layers)")
    return phases, notes, note, peaks
