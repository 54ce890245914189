"""A fit search shape from one layer sample (estimator.peak.sim.layer_trace.whole_trace_from_one).

The row's 2-, 3- and 4-layer samples prove the pieces and lifetimes of the step's trace (a :class:`Proof`); a later
shape of the same step runs the 3-layer sample only where that proof writes it exactly (every token, every partner,
the middle copies' labels alike) and its step's peak is its own trace's most live bytes. Checked against the whole
model's simulation (every layer simulated, the allocator replayed over its own trace): peak, breakdown and the
allocator's figures to the byte, on a dense decoder in inference, LoRA with gradient checkpointing, and an MoE in
training; made-up traces for what must be refused.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from estimator.peak import simulate_peak
from estimator.peak.sim.layer_trace import Periodicity, canonical, prove, whole_trace_from_one
from estimator.peak.sim.training import Recipe
from tests.test_layer_trace import CASES, LORA_CHECKPOINTED, WRITTEN, _model, _periodic, _scaled

LORA = Recipe(lora_rank=4, autocast_dtype=torch.bfloat16)


def _labels() -> list[str]:
    """Made-up labels by key (keys up to 499): weights below 200, activations from 200."""
    return ["weights" if key < 200 else "activations" for key in range(500)]


def test_one_sample_is_written_by_another_shape_s_proof_or_not_at_all() -> None:
    """The 3-layer sample of a larger shape alone gives the 9-layer trace, event for event, with each allocation's
    label; nothing where the proof does not write it: a layer that differs at this shape, a free that moved, an
    event more, the proof's top layer count (not one less), a middle copy holding something else."""
    proof = prove([_periodic(k) for k in (2, 3, 4)], (2, 3, 4))
    assert proof is not None
    sample = _scaled(_periodic(3), 3)
    labels = _labels()
    written = whole_trace_from_one(proof, sample, 3, 9, labels)
    assert written is not None
    events, written_labels = written
    truth = _scaled(_periodic(9), 3)
    assert canonical(events) == canonical(truth)
    keys = canonical(truth).keys
    assert [written_labels[pos] for pos, token in enumerate(canonical(events).tokens) if token > 0] == [
        labels[k] if k < 200 else "activations" for k, t in zip(keys, canonical(truth).tokens, strict=True) if t > 0]
    assert whole_trace_from_one(proof, _scaled(_periodic(4), 3), 4, 9, labels) is None  # the proof's top
    bent = [(key, n + 512 if key == 201 and n > 0 else n) for key, n in sample]  # the middle layer differs
    assert whole_trace_from_one(proof, bent, 3, 9, labels) is None
    moved = [*sample[:-4], sample[-3], sample[-4], *sample[-2:]]  # the last layer's activation freed a step later
    assert whole_trace_from_one(proof, moved, 3, 9, labels) is None
    longer = [*sample[:-1], (999, 512), (999, -1), sample[-1]]
    assert whole_trace_from_one(proof, longer, 3, 9, labels + ["temporaries"] * 500) is None
    other = [*labels[:201], "temporaries", *labels[202:]]  # layer 1's activation (the middle copy) another thing
    whole = whole_trace_from_one(proof, sample, 3, 9, other)
    assert whole is not None and "temporaries" in whole[1]  # taken for every middle layer: the first and last differ
    first = [*labels[:200], "temporaries", *labels[201:]]
    assert whole_trace_from_one(proof, sample, 3, 9, first) is not None  # the first layer's own, kept as the first


SEARCH = [CASES[0], CASES[1], CASES[4]]


@pytest.mark.parametrize(("kind", "work"), SEARCH, ids=[f"{k}-{w['mode']}" for k, w in SEARCH])
def test_a_search_shape_from_one_sample_gives_the_whole_model_s_figures(kind: str, work: dict[str, Any]) -> None:
    """The row's three samples prove the periodicity (batch 2 x 64); another shape (batch 3 x 48) runs the 3-layer
    sample only and gets the whole model's peak, breakdown and allocator figures, to the byte."""
    periodicity = Periodicity()
    simulate_peak(_model(kind), allocator=True, device="cuda", batch_size=2, seq_len=64, periodicity=periodicity, **work)
    shape: dict[str, Any] = {"device": "cuda", "batch_size": 3, "seq_len": 48}
    one = simulate_peak(_model(kind), allocator=True, periodicity=periodicity, **shape, **work)
    whole = simulate_peak(_model(kind), extrapolate_layers=False, **shape, **work)
    assert any("simulated with (3,) layers" in n and WRITTEN in n for n in one.notes), one.notes
    assert (one.peak_bytes, one.components, one.allocator_overhead) == (
        whole.peak_bytes, whole.components, whole.allocator_overhead)


def _with_copy(events: list[tuple[int, int]], freed_at: int = 1) -> list[tuple[int, int]]:
    """``events`` with a copy more in the fixed head (a tensor copied where the proof's shape took a view), freed
    ``freed_at`` events later."""
    copy = [(998, 64)]
    rest = events[1:]
    return [events[0], *copy, *rest[:freed_at - 1], (998, -1), *rest[freed_at - 1:]]


def test_one_sample_with_a_copy_more_outside_the_layers_is_written() -> None:
    """A shape that copies a tensor where the proof's took a view (Llama's shifted labels at batch 2, not at batch 1):
    the events more, allocated and freed within one fixed piece, are written into every layer count's trace; a copy
    freed inside the layers' runs is not (its lifetime could depend on the layer count)."""
    proof = prove([_periodic(k) for k in (2, 3, 4)], (2, 3, 4))
    assert proof is not None
    labels = _labels() + ["temporaries"] * 500
    written = whole_trace_from_one(proof, _with_copy(_scaled(_periodic(3), 3)), 3, 9, labels)
    assert written is not None and canonical(written[0]) == canonical(_with_copy(_scaled(_periodic(9), 3)))
    assert whole_trace_from_one(proof, _with_copy(_scaled(_periodic(3), 3), freed_at=6), 3, 9, labels) is None


@pytest.mark.parametrize("recipe", [LORA, LORA_CHECKPOINTED], ids=["lora", "lora-checkpointed"])
def test_a_batch_that_copies_more_is_written_from_one_sample(recipe: Recipe) -> None:
    """Llama LoRA: batch 2 allocates a copy more than batch 1 outside the layers (its shifted labels; with gradient
    checkpointing, allocated before the layers' checkpoints are freed and freed after them: two fixed pieces, a run
    between); the row's proof (batch 1) still writes batch 2's 3-layer sample, with the whole model's peak, breakdown
    and allocator figures to the byte."""
    work: dict[str, Any] = {"mode": "training", "recipe": recipe}
    periodicity = Periodicity()
    simulate_peak(_model("llama"), allocator=True, device="cuda", batch_size=1, seq_len=64, periodicity=periodicity, **work)
    shape: dict[str, Any] = {"device": "cuda", "batch_size": 2, "seq_len": 64}
    one = simulate_peak(_model("llama"), allocator=True, periodicity=periodicity, **shape, **work)
    whole = simulate_peak(_model("llama"), extrapolate_layers=False, **shape, **work)
    assert len(periodicity.proofs) == 1
    assert any("simulated with (3,) layers" in n and WRITTEN in n for n in one.notes), one.notes
    assert (one.peak_bytes, one.components, one.allocator_overhead) == (
        whole.peak_bytes, whole.components, whole.allocator_overhead)


def _marked(k: int, shape: bool = False, freed: str = "") -> list[tuple[int, int]]:
    """:func:`_periodic` of ``k`` layers with a temporary (key 997) between the forward and the backward (a fixed
    piece there), at the proof's shape or (``shape``) another; ``freed``: a copy more (key 998) allocated after the
    head and freed in that fixed piece (``"after"``: past the weights' and the forward's runs; a free right after the
    forward's would be put among its last layer's frees, :func:`~estimator.peak.sim.layer_trace.canonical`) or after the first
    layer's forward (``"inside"``: within a run)."""
    events = _scaled(_periodic(k), 3) if shape else _periodic(k)
    head, weights, forward, backward = events[:1], events[1:1 + k], events[1 + k:1 + 4 * k], events[1 + 4 * k:]
    marker = [(997, 32), (997, -1)]
    if freed == "after":
        return [*head, (998, 64), *weights, *forward, (997, 32), (998, -1), (997, -1), *backward]
    if freed == "inside":
        return [*head, (998, 64), *weights, *forward[:3], (998, -1), *forward[3:], *marker, *backward]
    return [*head, *weights, *forward, *marker, *backward]


def test_one_sample_with_a_copy_more_across_runs_is_written_only_between_fixed_pieces() -> None:
    """A copy more allocated in one fixed piece and freed in a later one, runs between (the shape's only difference
    from the proof's), is written into every layer count's trace; freed inside a run, it is not."""
    proof = prove([_marked(k) for k in (2, 3, 4)], (2, 3, 4))
    assert proof is not None
    labels = _labels() + ["temporaries"] * 500
    assert whole_trace_from_one(proof, _marked(3, shape=True), 3, 9, labels) is not None  # the shape alone: written
    written = whole_trace_from_one(proof, _marked(3, shape=True, freed="after"), 3, 9, labels)
    assert written is not None and canonical(written[0]) == canonical(_marked(9, shape=True, freed="after"))
    assert whole_trace_from_one(proof, _marked(3, shape=True, freed="inside"), 3, 9, labels) is None
