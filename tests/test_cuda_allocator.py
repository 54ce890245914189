"""PyTorch's CUDA caching allocator replayed over a trace (estimator.peak.kernels.cuda.allocator).

No GPU here: each case is worked out by hand from the rules of c10/cuda/CUDACachingAllocator.cpp
(the constants and functions named in the module docstring); the allocator's figures come from a
whole model's simulation only, never from the layer extrapolation.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from estimator import estimate
from estimator.peak import simulate_peak
from estimator.peak.kernels.cuda.allocator import replay, round_size, segment_size

KiB, MiB = 1024, 1024**2


def test_requests_are_rounded_to_512_bytes() -> None:
    assert [round_size(n) for n in (1, 511, 512, 513, 1000)] == [512, 512, 512, 1024, 1024]


def test_segments_are_2_mib_20_mib_or_the_request_rounded_to_2_mib() -> None:
    assert segment_size(512) == segment_size(MiB) == 2 * MiB  # small pool
    assert segment_size(MiB + 512) == segment_size(10 * MiB - 512) == 20 * MiB  # 1-10 MiB share 20 MiB segments
    assert segment_size(10 * MiB) == 10 * MiB and segment_size(11 * MiB) == 12 * MiB


def test_small_requests_share_a_2_mib_segment_until_it_is_full() -> None:
    # three 600 KiB tensors fit one 2 MiB segment (1800 KiB), the fourth needs a second one
    events = [(i, 600 * KiB) for i in range(4)]
    peaks = replay(events)
    assert peaks.segments == 2 and peaks.reserved_peak == 4 * MiB and peaks.allocated_peak == 2400 * KiB


def test_a_freed_block_is_reused_best_fit_and_merges_with_its_free_neighbours() -> None:
    # 12 MiB segment; free it; a 4 MiB request splits it (rest 8 MiB > 1 MiB), then 8 MiB fits the rest
    peaks = replay([(0, 12 * MiB), (0, -1), (1, 4 * MiB), (2, 8 * MiB)])
    assert peaks.segments == 1 and peaks.reserved_peak == 12 * MiB
    # two neighbours freed merge back into one 12 MiB block that serves a 12 MiB request
    peaks = replay([(0, 12 * MiB), (0, -1), (1, 4 * MiB), (2, 8 * MiB), (1, -1), (2, -1), (3, 12 * MiB)])
    assert peaks.segments == 1 and peaks.reserved_peak == 12 * MiB
    # a large block is not split when less than 1 MiB would remain: 11.5 MiB takes the whole 12 MiB
    peaks = replay([(0, 12 * MiB), (0, -1), (1, 11 * MiB + 512 * KiB), (2, 256 * KiB)])
    assert peaks.segments == 2 and peaks.allocated_peak == 12 * MiB + 256 * KiB


def test_a_request_larger_than_every_cached_block_reserves_a_new_segment() -> None:
    peaks = replay([(0, 12 * MiB), (1, 12 * MiB), (0, -1), (2, 14 * MiB)])
    assert peaks.segments == 3 and peaks.reserved_peak == 38 * MiB and peaks.allocated_peak == 26 * MiB


def _llama_config(layers: int) -> LlamaConfig:
    return LlamaConfig(hidden_size=128, intermediate_size=344, num_hidden_layers=layers, num_attention_heads=4,
                       num_key_value_heads=2, vocab_size=4000, architectures=["LlamaForCausalLM"])


def _llama(layers: int) -> torch.nn.Module:
    with torch.device("meta"):
        return LlamaForCausalLM._from_config(_llama_config(layers), dtype=torch.float32)


def test_allocator_figures_come_from_a_whole_model_only() -> None:
    """Segment packing is not linear in the layers (a line through 2, 3 and 4 layers of Llama-3.1-8B was
    off by up to 5x at some lengths), so an extrapolated simulation reports no allocator figures and says
    why, and a row checked against a GPU replays the allocator over the whole model's trace (written from the layer
    samples' where exactly periodic, tests/test_layer_trace.py): its figures are the whole model's replay."""
    for mode in ("inference", "training"):
        full = simulate_peak(_llama(8), mode=mode, device="cuda", batch_size=2, seq_len=64, extrapolate_layers=False)
        extrapolated = simulate_peak(_llama(8), mode=mode, device="cuda", batch_size=2, seq_len=64)
        assert extrapolated.peak_bytes == full.peak_bytes and any("extrapolated" in n for n in extrapolated.notes)
        assert extrapolated.allocator_overhead is None and full.allocator_overhead is not None
        assert any("replayed over a whole model only" in n for n in extrapolated.notes)
    cpu = simulate_peak(_llama(2), mode="inference", device="cpu", batch_size=1, seq_len=16)
    assert cpu.allocator_overhead is None  # a CPU run has no caching allocator to model


def test_a_row_checked_against_a_gpu_replays_the_whole_model(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(_llama_config(8).to_json_string())
    shape = {"mode": "inference", "dtypes": "float32", "batch_size": 2, "seq_len": 64}
    full = simulate_peak(_llama(8), mode="inference", device="cuda", batch_size=2, seq_len=64, extrapolate_layers=False)
    assert full.allocator_overhead is not None
    # A GPU smaller than the CUDA context alone: the row at this shape is the one checked here, and its fit search
    # (the largest batch and sequence, tests/test_fit.py) then stops at its first simulation instead of ~27 of them.
    row = estimate(str(tmp_path), gpu_memory="256MiB", **shape).rows[0]  # type: ignore[arg-type]
    assert row.fit is not None and row.fit["fits"] is False
    assert row.peak_bytes == full.peak_bytes and row.runtime_overhead is not None
    assert {k: row.runtime_overhead[k] for k in full.allocator_overhead} == full.allocator_overhead
    plain = estimate(str(tmp_path), **shape).rows[0]  # type: ignore[arg-type]
    assert plain.peak_bytes == full.peak_bytes and not set(plain.runtime_overhead or {}) & set(full.allocator_overhead)
