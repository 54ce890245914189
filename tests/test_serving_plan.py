"""The serving planner's arithmetic (estimator.serving.plan) against vLLM's own printed figures.

vLLM logs its plan at start-up; figures published in its issue tracker are the truth here:

- vllm-project/vllm PR #10511 (``vllm serve meta-llama/Meta-Llama-3-8B`` on an H100): total 79.22 GiB,
  utilization 0.90, weights 14.96 GiB, non-torch 1.79 GiB, activation peak 1.26 GiB ->
  available KV cache 53.29 GiB.
- vllm-project/vllm issue #10517 (Llama-3.1-8B-Instruct, RTX 3090): 1952 GPU blocks, "Maximum
  concurrency for 20000 tokens per request: 1.56x"; 1478 blocks, 29000 tokens: 0.82x and "the maximum
  number of tokens that can be stored in KV cache (23648)".
- LMCache/LMCache issue #1739 (vLLM V1, Qwen3-14B): "Available KV cache memory: 6.51 GiB", "GPU KV cache
  size: 42,656 tokens", "Maximum concurrency for 32,768 tokens per request: 1.30x".

Block groups of hybrid models follow the example in vLLM's ``_get_kv_cache_config_uniform_page_size``
docstring (2 full + 3 sliding layers -> 3 groups of 2 layers).
"""

from __future__ import annotations

import pytest

from estimator.serving.kv import KVLayer, KVLayout
from estimator.serving.plan import batch_defaults, estimate_max_model_len, kv_blocks, plan

GiB = 1024**3


def uniform(layers: int, kv_heads: int, head_dim: int, dtype_bytes: int = 2) -> KVLayout:
    return KVLayout(tuple(KVLayer("full", 2 * kv_heads * head_dim * dtype_bytes) for _ in range(layers)), dtype_bytes)


LLAMA_8B = uniform(32, 8, 128)
QWEN3_14B = uniform(40, 8, 128)  # 40 layers, 8 KV heads of 128 (Qwen3-14B's config)


def test_budget_matches_vllms_log() -> None:
    p = plan(LLAMA_8B, capacity_bytes=int(79.22 * GiB), weights_bytes=int(14.96 * GiB), profile_peak_bytes=int(1.26 * GiB),
             non_torch_bytes=int(1.79 * GiB), max_model_len=8192, max_num_seqs=256, max_num_batched_tokens=8192)
    # The log rounds every figure to 0.01 GiB: each input is known to +-0.005 GiB.
    assert p.requested_bytes / GiB == pytest.approx(71.29, abs=0.0095)
    assert p.available_kv_bytes / GiB == pytest.approx(53.29, abs=0.025)


@pytest.mark.parametrize(("blocks", "max_model_len", "shown"), [(1952, 20000, "1.56"), (1478, 29000, "0.82")])
def test_concurrency_matches_vllms_log(blocks: int, max_model_len: int, shown: str) -> None:
    page = 16 * LLAMA_8B.layers[0].bytes_per_token
    available = blocks * page * 32 + page  # any budget with exactly this many blocks
    b = kv_blocks(LLAMA_8B, available, block_size=16, max_model_len=max_model_len, max_num_batched_tokens=2048)
    assert b.num_blocks == blocks
    assert f"{b.max_concurrency:.2f}" == shown
    if max_model_len == 29000:
        assert b.tokens == 23648
        assert b.num_blocks < b.blocks_per_request  # vLLM refused to start


def test_kv_cache_size_in_tokens_matches_vllm_v1s_log() -> None:
    # "6.51 GiB" is anything in [6.505, 6.515) GiB; the 42,656 tokens must lie in what those give.
    low = kv_blocks(QWEN3_14B, int(6.505 * GiB), block_size=16, max_model_len=32768, max_num_batched_tokens=2048)
    high = kv_blocks(QWEN3_14B, int(6.515 * GiB), block_size=16, max_model_len=32768, max_num_batched_tokens=2048)
    assert low.tokens <= 42656 <= high.tokens
    exact = kv_blocks(QWEN3_14B, 42656 // 16 * 16 * QWEN3_14B.bytes_per_token, block_size=16, max_model_len=32768,
                      max_num_batched_tokens=2048)
    assert exact.tokens == 42656
    assert f"{exact.max_concurrency:.2f}" == "1.30"


def test_tokens_and_blocks_from_the_budget() -> None:
    """Written the other way round: whole tokens of the budget, rounded down to whole blocks."""
    available = 59_935_473_152
    b = kv_blocks(LLAMA_8B, available, block_size=16, max_model_len=32768, max_num_batched_tokens=8192)
    tokens = available // LLAMA_8B.bytes_per_token
    assert b.tokens == tokens - tokens % 16
    assert b.cache_bytes == b.tokens * LLAMA_8B.bytes_per_token <= available
    assert b.blocks_per_request == 32768 // 16
    assert b.max_concurrency == b.tokens / 32768


def test_hybrid_groups_follow_vllms_example() -> None:
    per_token = 2 * 4 * 64 * 2
    layout = KVLayout((KVLayer("full", per_token), KVLayer("full", per_token),
                       KVLayer("sliding", per_token, 512), KVLayer("sliding", per_token, 512), KVLayer("sliding", per_token, 512)), 2)
    page = 16 * per_token
    b = kv_blocks(layout, 1000 * page * 2, block_size=16, max_model_len=4096, max_num_batched_tokens=2048)
    assert (b.group_size, [g.layers for g in b.groups]) == (2, [2, 2, 1])  # (full.0, full.1), (sw.0, sw.1), (sw.2, padding)
    assert b.num_blocks == 1000
    assert b.tokens == 1000 // 3 * 16
    # a request of 4096 tokens: 256 blocks in the full group; min(511 + 2048, 4096) tokens + 1 block in each sliding group
    assert b.blocks_per_request == 256 + 2 * (-(-2559 // 16) + 1)
    assert b.cache_bytes == 1000 * page * 2


def test_gemma3_pattern_groups_by_the_full_layers() -> None:
    per_token = 2 * 4 * 256 * 2
    layout = KVLayout(tuple(KVLayer("full" if i % 6 == 5 else "sliding", per_token, None if i % 6 == 5 else 1024)
                            for i in range(12)), 2)
    b = kv_blocks(layout, 10**10, block_size=16, max_model_len=8192, max_num_batched_tokens=2048)
    assert b.group_size == 2 and len(b.groups) == 6  # 2 full layers: 1 full group, 5 sliding groups of 2


def test_sliding_window_request_is_capped() -> None:
    mistral = KVLayout(tuple(KVLayer("sliding", 2 * 8 * 128 * 2, 4096) for _ in range(32)), 2)
    b = kv_blocks(mistral, 10 * GiB, block_size=16, max_model_len=32768, max_num_batched_tokens=2048)
    assert b.blocks_per_request == -(-(4095 + 2048) // 16) + 1


def test_does_not_fit_and_the_longest_context_that_would() -> None:
    p = plan(LLAMA_8B, capacity_bytes=20 * GiB, weights_bytes=16 * GiB, profile_peak_bytes=GiB // 2, max_model_len=131072,
             max_num_seqs=256, max_num_batched_tokens=2048)
    assert not p.fits
    longest = estimate_max_model_len(LLAMA_8B, p.available_kv_bytes, max_num_batched_tokens=2048, limit=131072)
    assert longest * LLAMA_8B.bytes_per_token <= p.available_kv_bytes < (longest + 16) * LLAMA_8B.bytes_per_token
    assert f"{longest:,}" in p.notes[0]
    broke = plan(LLAMA_8B, capacity_bytes=16 * GiB, weights_bytes=16 * GiB, profile_peak_bytes=GiB, max_model_len=8192,
                 max_num_seqs=256, max_num_batched_tokens=2048)
    assert not broke.fits and broke.blocks.num_blocks == 0 and "does not fit" in broke.notes[0]


def test_batch_defaults_are_vllm_serves() -> None:
    assert batch_defaults(80 * GiB, "H100 80GB") == (8192, 1024)
    assert batch_defaults(80 * GiB, "A100 80GB") == (2048, 256)  # vLLM keeps A100s on the small defaults (its PR #17885)
    assert batch_defaults(24 * GiB, "L4") == (2048, 256)
    assert batch_defaults(141 * GiB, None) == (8192, 1024)
