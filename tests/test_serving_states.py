"""Hybrid and SSM models in ``--mode serving``: the per-request state vLLM 0.19 keeps, and its block rules.

- The state of every recurrent layer (``estimator.serving.states``, vLLM's ``MambaStateShapeCalculator``)
  against the cache transformers' own model fills in a real CPU forward of a tiny config: the conv width
  and kernel, the SSM / recurrent state's dims, per layer, for Mamba, Mamba2, Jamba, Falcon-H1, Bamba,
  GraniteMoeHybrid, Qwen3-Next (gated DeltaNet) and LFM2 (short convolutions). vLLM keeps the conv
  state's last ``kernel - 1`` inputs where transformers keeps ``kernel`` (it shifts before it writes),
  and keeps both states in the model's dtype: the bytes compared are the real tensors' scaled by that.
- The attention block size, the padding of the state page, the KV tokens and the maximum concurrency
  vLLM logged at published starts (tests/data/serving/hybrid_starts.json: Qwen3-Next-80B-A3B at TP2,
  Qwen3.5-0.8B), and the rule on Falcon-H1's parallel hybrid layers.
- A serving row of a hybrid model: its state fields and note; a recurrent-only model (Mamba2).
"""

from __future__ import annotations

import json
from math import prod
from pathlib import Path
from typing import Any

import pytest
import torch

from estimator.serving.kv import kv_layout
from estimator.serving.plan import kv_blocks
from testkit.hybrid_truth import HYBRID_CASES

DATA = Path(__file__).parent / "data" / "serving" / "hybrid_starts.json"
GiB = 1024**3

# distinct widths where the tiny cases have equal ones, so a swapped dim cannot pass
_OVERRIDES: dict[str, dict[str, Any]] = {"qwen3_next_16": {"linear_value_head_dim": 16, "linear_conv_kernel_dim": 3}}
FAMILIES = ["mamba_16", "mamba2_16", "jamba_16", "falcon_h1_16", "bamba_16", "granitemoehybrid_16", "qwen3_next_16",
            "lfm2_16"]


def _config(case: str) -> Any:
    import transformers

    c = HYBRID_CASES[case]
    return transformers.AutoConfig.for_model(c.model_type, **{**c.overrides, **_OVERRIDES.get(case, {})})


def _real_states(case: str) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The conv and recurrent state tensors of the cache a real CPU forward (one sequence of 5 tokens) fills."""
    import transformers
    from transformers import DynamicCache

    from estimator.peak.sim.caches import cache_argument, returned_cache, state_tensors

    config = _config(case)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    with torch.no_grad():
        out = model(input_ids=torch.ones(1, 5, dtype=torch.long), use_cache=True,
                    **{cache_argument(model): DynamicCache(config=model.config)})
    return state_tensors(returned_cache(out))


@pytest.mark.parametrize("case", FAMILIES)
def test_state_per_layer_is_that_of_transformers_real_cache(case: str) -> None:
    conv, ssm = _real_states(case)
    layout = kv_layout(_config(case), dtype_bytes=4, model_bytes=4)  # the real run is float32
    recurrent = layout.recurrent
    assert len(recurrent) == len(conv) > 0
    for layer, real_conv in zip(recurrent, conv, strict=True):
        state = layer.state
        assert state is not None
        _, width, kernel = real_conv.shape  # transformers: (batch, conv width, kernel)
        assert state.conv == (kernel - 1, width)  # vLLM's "SD" layout: (kernel - 1, width)
        assert state.conv_state_bytes == real_conv.nbytes // kernel * (kernel - 1)
    if HYBRID_CASES[case].model_type == "lfm2":
        assert not ssm and all(layer.state is not None and layer.state.ssm is None for layer in recurrent)
        return
    assert len(ssm) == len(recurrent)
    for layer, real_ssm in zip(recurrent, ssm, strict=True):
        state = layer.state
        assert state is not None and state.ssm is not None
        dims = tuple(real_ssm.shape[1:])
        if state.kind == "gated_delta_net":  # vLLM keeps (heads, v_dim, k_dim), transformers (heads, k_dim, v_dim)
            dims = (dims[0], dims[2], dims[1])
        assert state.ssm == dims
        assert state.ssm_state_bytes == real_ssm.nbytes == prod(dims) * 4
        assert layer.state_bytes == state.conv_state_bytes + state.ssm_state_bytes


def test_states_in_the_model_dtype_and_split_over_tensor_parallel_ranks() -> None:
    """vLLM's dtype rule (both states in the model's dtype, not the KV cache's fp8) and its TP shards, on Mamba2:
    n_groups 1 is replicated to every rank (extra_groups_for_head_shards), the heads are split."""
    config = _config("mamba2_16")  # hidden 32, expand 2 (64), 8 heads of 8, state 8, 1 group, kernel 4
    one = kv_layout(config, dtype_bytes=1, model_bytes=2).recurrent[0].state
    two = kv_layout(config, dtype_bytes=1, model_bytes=2, tp=2).recurrent[0].state
    assert one is not None and two is not None
    assert one.conv == (3, 64 + 2 * 8) and one.ssm == (8, 8, 8) and one.conv_bytes == one.ssm_bytes == 2
    assert two.conv == (3, (64 + 2 * 2 * 8) // 2) and two.ssm == (4, 8, 8)


def _starts() -> list[dict[str, Any]]:
    return json.loads(DATA.read_text())["starts"]


@pytest.mark.parametrize("start", _starts(), ids=lambda s: s["name"])
def test_block_size_padding_tokens_and_concurrency_as_vllm_logged_them(start: dict[str, Any]) -> None:
    import transformers

    config = transformers.AutoConfig.for_model(start["model_type"], **start["config"])
    layout = kv_layout(config, dtype_bytes=start["dtype_bytes"], tp=start["tensor_parallel_size"])
    available = int(start.get("available_gib", 10) * GiB)
    blocks = kv_blocks(layout, available, block_size=16, max_model_len=start.get("max_model_len", 4096),
                       max_num_batched_tokens=8192)
    assert blocks.block_size == start["block_size"]
    assert round(100 * (blocks.page_bytes - blocks.state_page_bytes) / blocks.state_page_bytes, 2) == start["padding_pct"]
    if "kv_cache_tokens" in start:  # the log rounds the available memory to 0.01 GiB: both ends of it give the figures
        for gib in (start["available_gib"] - 0.005, start["available_gib"] + 0.004):
            b = kv_blocks(layout, int(gib * GiB), block_size=16, max_model_len=start["max_model_len"],
                          max_num_batched_tokens=8192)
            assert b.tokens == start["kv_cache_tokens"]
            assert abs(b.max_concurrency - start["max_concurrency"]) < 0.006


def test_falcon_h1_parallel_layers_are_an_attention_and_a_state_layer_each() -> None:
    """Falcon-H1-Tiny-90M's published widths (hidden 512, 24 layers, 2 KV heads of 64, Mamba2 d_ssm 768, 24 heads of 32,
    state 64, one group, kernel 4), bfloat16: a state of 3 x 896 x 2 + 24 x 32 x 64 x 2 = 103,680 bytes per layer, an
    attention token of 2 x 2 x 64 x 2 = 512 bytes, so 16 x cdiv(103,680, 16 x 512) = 208 tokens per block and a page
    of 106,496 bytes; 24 attention and 24 state layers: two groups of 24."""
    from transformers import FalconH1Config

    config = FalconH1Config(hidden_size=512, num_hidden_layers=24, num_attention_heads=8, num_key_value_heads=2, head_dim=64,
                            mamba_d_ssm=768, mamba_n_heads=24, mamba_d_head=32, mamba_d_state=64, mamba_n_groups=1,
                            mamba_d_conv=4, vocab_size=32768)
    layout = kv_layout(config, dtype_bytes=2)
    assert (len(layout.attention), len(layout.recurrent)) == (24, 24)
    assert layout.recurrent[0].state_bytes == 103_680
    b = kv_blocks(layout, 10 * GiB, block_size=16, max_model_len=8192, max_num_batched_tokens=8192)
    assert (b.block_size, b.page_bytes, b.group_size, len(b.groups)) == (208, 106_496, 24, 2)
    assert b.blocks_per_request == -(-8192 // 208) + 1  # the attention blocks of max_model_len and one state block
    assert b.num_blocks == 10 * GiB // (106_496 * 24)
    # a larger --block-size is kept, and the state page padded to it
    assert kv_blocks(layout, 10 * GiB, block_size=512, max_model_len=8192, max_num_batched_tokens=8192).page_bytes == 512 * 512


def _serve(case: str, tmp_path: Path) -> Any:
    import transformers

    from estimator import estimate

    c = HYBRID_CASES[case]
    config = transformers.AutoConfig.for_model(c.model_type, **c.overrides)
    config.architectures = [type(c.build_on("meta")).__name__]
    config.save_pretrained(tmp_path)
    result = estimate(str(tmp_path), mode="serving", dtypes="bfloat16", gpu="H100-80GB", max_model_len=4096)
    return result


def test_a_hybrid_serving_row_counts_the_state(tmp_path: Path) -> None:
    from estimator_app.tables import serving_html

    result = _serve("qwen3_next_16", tmp_path)
    (row,) = result.rows
    assert "Recurrent state per request" in serving_html(result)
    served = row.serving
    assert served is not None and row.peak_bytes is not None, row.notes
    import transformers

    c = HYBRID_CASES["qwen3_next_16"]
    state = kv_layout(transformers.AutoConfig.for_model(c.model_type, **c.overrides), dtype_bytes=2).recurrent[0]
    assert served["state_layers"] == 1 and served["state_page_bytes"] == state.state_bytes
    assert served["state_bytes_per_request"] == served["conv_state_bytes_per_request"] + served["ssm_state_bytes_per_request"]
    assert served["state_blocks_per_request"] == 1
    assert served["blocks_per_request"] == -(-4096 // served["block_size"]) + 1
    assert served["kv_cache_tokens"] == served["num_blocks"] // served["kv_cache_groups"] * served["block_size"]
    assert any(n.startswith("recurrent state: 1 layer(s)") for n in row.notes), row.notes


def test_a_recurrent_only_model_keeps_one_state_block_per_request(tmp_path: Path) -> None:
    (row,) = _serve("mamba2_16", tmp_path).rows
    served = row.serving
    assert served is not None, row.notes
    assert served["kv_bytes_per_token"] == 0 and served["state_layers"] == 2
    assert served["blocks_per_request"] == 1 and served["block_size"] == 4096  # mamba_block_size: max_model_len
    assert served["max_concurrency"] == served["num_blocks"]
    assert served["kv_cache_bytes"] == served["num_blocks"] * 2 * served["state_page_bytes"]


def test_a_pipeline_stage_without_attention_layers_keeps_the_models_block_size_and_page() -> None:
    """vLLM sets the block size and the padded state page from the whole config, so a stage of Jamba's
    recurrent layers only still keeps the attention page per block."""
    from transformers import JambaConfig

    config = JambaConfig(hidden_size=32, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                         attn_layer_period=4, attn_layer_offset=3, expert_layer_period=4, expert_layer_offset=1,
                         num_experts=2, num_experts_per_tok=1, mamba_d_state=8, mamba_dt_rank=4, vocab_size=1000)
    whole = kv_blocks(kv_layout(config, dtype_bytes=2), GiB, block_size=16, max_model_len=4096, max_num_batched_tokens=8192)
    first = kv_blocks(kv_layout(config, dtype_bytes=2, layers=range(0, 2)), GiB, block_size=16, max_model_len=4096,
                      max_num_batched_tokens=8192)
    assert whole.block_size == first.block_size > 16 and whole.page_bytes == first.page_bytes > first.state_page_bytes
    assert first.blocks_per_request == 1 and first.state_blocks_per_request == 1
