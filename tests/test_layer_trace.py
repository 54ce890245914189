"""The whole model's allocation trace written from its 2-, 3- and 4-layer samples (estimator.peak.sim.layer_trace).

With a GPU chosen the caching allocator is replayed over the step's allocations; the layer samples give the whole
model's trace where it is exactly periodic in the layers. Checked against the whole model's simulation (the
independent truth here: every layer simulated, the allocator replayed over its own trace): the trace event by
event, and the figures the answer shows (peak, breakdown, allocator rounding and reserved bytes, fits, largest
batch and longest sequence); models whose samples are not periodic fall back to the whole model.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch
import transformers

from estimator import estimate
from estimator.peak import simulate_peak
from estimator.peak.engine import run_simulation
from estimator.peak.kernels.cuda.allocator import replay
from estimator.peak.sim import layers
from estimator.peak.sim.layer_trace import Periodicity, canonical, prove, whole_trace, whole_trace_from
from estimator.peak.sim.layers import with_layers
from estimator.peak.sim.tracker import PeakSnapshot
from estimator.peak.sim.training import Recipe
from estimator.speed.trace import CostTrace

TINY = {"hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 6, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": 512, "max_position_embeddings": 1024}
WRITTEN = "written from the samples'"


def _model(kind: str, **extra: Any) -> torch.nn.Module:
    config: Any
    if kind == "llama":
        config = transformers.LlamaConfig(**TINY, **extra)
    elif kind == "mistral":  # a sliding window shorter than the sequence, alike in every layer
        config = transformers.MistralConfig(**TINY, sliding_window=16, **extra)
    elif kind == "qwen2":
        config = transformers.Qwen2Config(**TINY, **extra)
    elif kind == "mixtral":  # an MoE: routed experts in every layer
        config = transformers.MixtralConfig(**TINY, num_local_experts=4, num_experts_per_tok=2, **extra)
    elif kind == "gemma2":  # sliding and full attention alternating: the layers are not alike
        config = transformers.Gemma2Config(**{**TINY, "head_dim": 16}, sliding_window=16, **extra)
    else:
        raise ValueError(kind)
    with torch.device("meta"):
        return transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)


LORA_CHECKPOINTED = Recipe(lora_rank=4, gradient_checkpointing=True, autocast_dtype=torch.bfloat16)
CASES = [
    ("llama", {"mode": "inference", "max_new_tokens": 2}),
    ("llama", {"mode": "training", "recipe": LORA_CHECKPOINTED}),
    ("mistral", {"mode": "inference"}),
    ("qwen2", {"mode": "training"}),
    ("mixtral", {"mode": "training"}),
]


@pytest.mark.parametrize(("kind", "work"), CASES, ids=[f"{k}-{w['mode']}" for k, w in CASES])
def test_the_allocator_over_the_written_trace_gives_the_whole_model_s_figures(kind: str, work: dict[str, Any]) -> None:
    shape = {"device": "cuda", "batch_size": 2, "seq_len": 32}
    written = simulate_peak(_model(kind), allocator=True, **shape, **work)
    whole = simulate_peak(_model(kind), extrapolate_layers=False, **shape, **work)
    assert any(WRITTEN in n for n in written.notes), written.notes
    assert whole.allocator_overhead is not None and whole.allocator_overhead["reserved_extra"] > 0
    assert (written.peak_bytes, written.components, written.allocator_overhead, written.outputs_kept_bytes) == (
        whole.peak_bytes, whole.components, whole.allocator_overhead, whole.outputs_kept_bytes)


def test_the_written_trace_is_the_whole_model_s_event_by_event() -> None:
    """LoRA with gradient checkpointing (the recomputed forward, the adapters' optimizer states, bursts of frees in
    the garbage collector's order), 2, 3, 4 layers written out to 7: the same allocations and frees as the 7-layer
    model's own trace (a burst of frees between two allocations in allocation order: the allocator's state after it
    does not depend on their order), so the same allocator figures."""
    model = _model("llama")

    def trace(k: int) -> list[tuple[int, int]]:
        events = run_simulation(with_layers(model, k), "training", "cuda", 2, 32, None, 0, LORA_CHECKPOINTED)[3]
        assert events is not None
        return events

    whole = trace(7)
    written = whole_trace([trace(k) for k in (2, 3, 4)], (2, 3, 4), 7)
    assert written is not None
    assert canonical(written) == canonical(whole)
    assert replay(written) == replay(whole)


def _periodic(k: int, head: int = 0) -> list[tuple[int, int]]:
    """A made-up trace of k layers: weights, a forward keeping one activation per layer, a reversed backward."""
    events: list[tuple[int, int]] = [(0, 4096 + head)]
    for i in range(k):  # weights, kept
        events.append((100 + i, 2048))
    for i in range(k):  # forward: a saved activation and a temporary
        events += [(200 + i, 1536), (300 + i, 512), (300 + i, -1)]
    for i in reversed(range(k)):  # backward frees the layer's activation
        events += [(400 + i, 1024), (200 + i, -1), (400 + i, -1)]
    return events


def test_samples_that_are_not_periodic_give_no_trace() -> None:
    samples = [_periodic(k) for k in (2, 3, 4)]
    written = whole_trace(samples, (2, 3, 4), 9)
    assert written is not None and canonical(written) == canonical(_periodic(9))
    bent = [*samples[:2], [(key, n + 512 if key == 203 and n > 0 else n) for key, n in samples[2]]]  # the 4th layer differs
    assert whole_trace(bent, (2, 3, 4), 9) is None
    longer = [*samples[:2], [*samples[2][:-1], (999, 512), (999, -1), samples[2][-1]]]  # an event more, once
    assert whole_trace(longer, (2, 3, 4), 9) is None
    reordered = [samples[0], samples[1], [*samples[2][:8], *samples[2][11:14], *samples[2][8:11], *samples[2][14:]]]
    assert whole_trace(reordered, (2, 3, 4), 9) is None


def test_a_model_whose_samples_are_not_periodic_is_simulated_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """Linear peaks but a trace that is not periodic: no figures from the samples (the caller simulates the whole
    model); alternating layers (Gemma 2) are not sampled at all; both give the whole model's figures."""
    def simulate(model: torch.nn.Module) -> tuple[dict[str, PeakSnapshot], tuple[str, ...], None, list[tuple[int, int]]]:
        k = model.config.num_hidden_layers
        return {"forward": PeakSnapshot(100 * k, {"weights": 100 * k})}, (), None, _periodic(k, head=k)

    model = _model("llama")
    assert layers.extrapolate(model, 6, simulate) is not None  # the peaks alone are linear
    assert layers.extrapolate(model, 6, simulate, allocator=True) is None
    shape: dict[str, Any] = {"mode": "inference", "device": "cuda", "batch_size": 2, "seq_len": 32}
    gemma = simulate_peak(_model("gemma2"), allocator=True, **shape)
    whole = simulate_peak(_model("gemma2"), extrapolate_layers=False, **shape)
    assert not any("alike layers" in n for n in gemma.notes)
    assert gemma.allocator_overhead is not None and gemma.allocator_overhead == whole.allocator_overhead


@pytest.mark.parametrize(("mode", "memory"), [("inference", "437MiB"), ("training", "450MiB")])
def test_fits_largest_batch_and_longest_sequence_equal_the_whole_model_s(mode: str, memory: str, tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The answer with a GPU chosen, its fit search included, from written traces and from whole-model
    simulations (layer sampling switched off): the same row, every fit figure and boundary the same. (The
    capacities leave a few MiB above batch 2's needs: a short search, across the allocator's segment steps.)"""
    config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], **{**TINY, "max_position_embeddings": 256}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    options: dict[str, Any] = {"mode": mode, "dtypes": "bfloat16", "batch_size": 2, "seq_len": 64, "gpu_memory": memory}
    if mode == "training":
        options.update(lora_rank=4, gradient_checkpointing=True)
    written = estimate(str(tmp_path), **options).rows[0]
    assert any(WRITTEN in n for n in written.notes)
    monkeypatch.setattr(layers, "layer_count", lambda model: None)
    whole = estimate(str(tmp_path), **options).rows[0]
    assert not any(WRITTEN in n for n in whole.notes)
    assert written.fit is not None and written.fit["max_batch_size"] >= 2 and written.fit["max_seq_len"] is not None
    assert written.fit["batch_boundary"]["needed_above_max"] > written.fit["capacity_bytes"]
    assert (written.peak_bytes, written.components, written.runtime_overhead, written.fit) == (
        whole.peak_bytes, whole.components, whole.runtime_overhead, whole.fit)


def test_the_costs_of_a_gpu_answer_from_samples_equal_the_whole_model_s() -> None:
    """With a GPU chosen the per-op costs come from the same layer samples: op for op the whole model's."""
    shape: dict[str, Any] = {"mode": "inference", "device": "cuda", "batch_size": 1, "seq_len": 16, "max_new_tokens": 2}
    sampled, whole = CostTrace(layers=6), CostTrace(layers=6)
    simulate_peak(_model("llama"), allocator=True, observe=sampled.observe, **shape)
    simulate_peak(_model("llama"), extrapolate_layers=False, observe=whole.observe, **shape)
    a, b = sampled.phase_costs(), whole.phase_costs()
    assert set(a) == set(b) and all(Counter(a[p].ops) == Counter(b[p].ops) for p in b)
    assert all(a[p].flops == b[p].flops for p in b)


def _scaled(events: list[tuple[int, int]], factor: int) -> list[tuple[int, int]]:
    """The same program at a larger shape: every activation (keys from 200 on) ``factor`` times larger."""
    return [(key, n * factor if n > 0 and key >= 200 else n) for key, n in events]


def test_two_samples_are_written_by_another_shape_s_proof_or_not_at_all() -> None:
    """Three samples prove the pieces and lifetimes once; at another shape the 3- and 4-layer samples alone give the
    whole trace where that proof writes both exactly, event for event, and nothing where it does not: a 4th layer
    that differs at this shape only (a sliding window shorter than this sequence in some layers), a free that moved
    (another lifetime), an event more (another kernel or workspace)."""
    proof = prove([_periodic(k) for k in (2, 3, 4)], (2, 3, 4))
    assert proof is not None and proof.top_layers == 4
    larger = [_scaled(_periodic(k), 3) for k in (3, 4)]
    written = whole_trace_from(proof, larger, (3, 4), 9)
    assert written is not None and canonical(written) == canonical(_scaled(_periodic(9), 3))
    assert whole_trace_from(proof, larger, (2, 3), 9) is None  # not the proof's top and the one below
    bent = [larger[0], [(key, n + 512 if key == 203 and n > 0 else n) for key, n in larger[1]]]
    assert whole_trace_from(proof, bent, (3, 4), 9) is None
    top = larger[1]
    moved = [larger[0], [*top[:-4], top[-3], top[-4], *top[-2:]]]  # the last layer's activation freed a step later
    assert whole_trace_from(proof, moved, (3, 4), 9) is None
    longer = [larger[0], [*top[:-1], (999, 512), (999, -1), top[-1]]]
    assert whole_trace_from(proof, longer, (3, 4), 9) is None


SEARCH = [CASES[0], CASES[1], CASES[4]]


@pytest.mark.parametrize(("kind", "work"), SEARCH, ids=[f"{k}-{w['mode']}" for k, w in SEARCH])
def test_a_search_shape_from_two_samples_gives_the_whole_model_s_figures(kind: str, work: dict[str, Any],
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The fit search's shapes: the row's three samples prove the periodicity (batch 2 x 64), another shape (batch 3
    x 48) runs two (the one-sample path off: tests/test_layer_trace_one.py) and gets the whole model's peak and
    allocator figures, to the byte."""
    monkeypatch.setattr(layers, "_from_one", lambda *a, **k: None)
    periodicity = Periodicity()
    simulate_peak(_model(kind), allocator=True, device="cuda", batch_size=2, seq_len=64, periodicity=periodicity, **work)
    assert len(periodicity.proofs) == 1
    shape: dict[str, Any] = {"device": "cuda", "batch_size": 3, "seq_len": 48}
    two = simulate_peak(_model(kind), allocator=True, periodicity=periodicity, **shape, **work)
    whole = simulate_peak(_model(kind), extrapolate_layers=False, **shape, **work)
    assert any("simulated with (3, 4) layers" in n and WRITTEN in n for n in two.notes), two.notes
    assert (two.peak_bytes, two.allocator_overhead) == (whole.peak_bytes, whole.allocator_overhead)


def test_a_shape_the_proof_does_not_write_runs_three_samples() -> None:
    """The rule's fallback: a proof made by another step (LoRA training, checkpointed) does not write an inference
    step's samples, so the third is run and the answer is the three samples' (the whole model's figures)."""
    periodicity = Periodicity()
    simulate_peak(_model("llama"), allocator=True, device="cuda", batch_size=2, seq_len=64, periodicity=periodicity,
                  **CASES[1][1])
    shape: dict[str, Any] = {"mode": "inference", "device": "cuda", "batch_size": 3, "seq_len": 48}
    three = simulate_peak(_model("llama"), allocator=True, periodicity=periodicity, **shape)
    whole = simulate_peak(_model("llama"), extrapolate_layers=False, **shape)
    assert any("simulated with (2, 3, 4) layers" in n and WRITTEN in n for n in three.notes), three.notes
    assert (three.peak_bytes, three.allocator_overhead) == (whole.peak_bytes, whole.allocator_overhead)
