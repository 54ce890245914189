"""KV bytes per token (estimator.serving.kv) against two independent truths.

1. Published configs (tests/hub_data): the figure computed here by hand from the raw config.json,
   with no transformers class involved, and, for the best-known models, the figure published for
   them (Llama-3.1-8B: 128 KiB per token in bf16; 70B: 320 KiB; DeepSeek-R1's MLA: 61 layers x 576).
2. The simulator: the storages the KV cache of a transformers prefill really holds, on fake tensors
   (``AFTER + "prefill"``: what ``simulate_step`` sees live once the prefill returns, labelled
   ``kv_cache``). Same configs with 2 layers (the cache is per layer; fake tensors make the width
   free). Transformers 5 caches MLA as vLLM does (the latent and the rope key, one "head"), so
   DeepSeek-R1 and V3 are checked there too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from estimator.serving.kv import kv_layout

DATA = Path(__file__).parent / "hub_data"
PUBLISHED = {
    "meta-llama/Llama-3.1-8B": "models",
    "meta-llama/Llama-3.1-70B": "models_unverified",
    "meta-llama/Llama-3.1-405B": "models_unverified",
    "meta-llama/Llama-3.2-3B": "models",
    "meta-llama/Llama-2-7b-hf": "models",
    "mistralai/Mixtral-8x7B-v0.1": "models",
    "mistralai/Mistral-7B-v0.1": "models_unverified",
    "Qwen/Qwen2.5-7B": "models",
    "google/gemma-2b-it": "models",
    "google/gemma-7b": "models_unverified",
    "deepseek-ai/DeepSeek-R1": "models",
    "deepseek-ai/DeepSeek-V3": "models_unverified",
    "openai-community/gpt2": "models",
    "bigscience/bloom": "models",
}
# Figures published for these models (bf16 KV cache), bytes per token.
KNOWN = {
    "meta-llama/Llama-3.1-8B": 128 * 1024,   # 32 layers x 8 KV heads x 128 x 2 (K, V) x 2 bytes
    "meta-llama/Llama-3.1-70B": 320 * 1024,  # 80 layers x 8 x 128 x 2 x 2
    "mistralai/Mixtral-8x7B-v0.1": 128 * 1024,
    "deepseek-ai/DeepSeek-R1": 61 * 576 * 2,  # MLA: 512 latent + 64 rope dims per layer, no K/V pair
}


def raw(repo: str) -> dict[str, Any]:
    return dict(json.loads((DATA / PUBLISHED[repo] / repo / "config.json").read_text()))


def config_of(data: dict[str, Any], **changes: Any) -> Any:
    from transformers import AutoConfig

    data = {k: v for k, v in data.items() if k not in ("auto_map", "quantization_config")}
    data.update(changes)
    return AutoConfig.for_model(**data)


def by_hand(d: dict[str, Any], dtype_bytes: int = 2) -> int:
    """Bytes per token of the whole cache, from the raw config.json, no window."""
    layers = d.get("num_hidden_layers") or d["n_layer"]
    if d.get("kv_lora_rank"):
        return layers * (d["kv_lora_rank"] + d["qk_rope_head_dim"]) * dtype_bytes
    heads = d.get("num_attention_heads") or d.get("n_head")
    kv_heads = d.get("num_key_value_heads") or heads
    width = d.get("hidden_size") or d.get("n_embd") or d.get("n_embed")  # bloom spells it n_embed
    head_dim = d.get("head_dim") or width // heads
    return layers * 2 * kv_heads * head_dim * dtype_bytes


@pytest.mark.parametrize("repo", list(PUBLISHED))
def test_bytes_per_token_of_published_configs(repo: str) -> None:
    d = raw(repo)
    layout = kv_layout(config_of(d), dtype_bytes=2)
    assert layout.bytes_per_token == by_hand(d)
    if repo in KNOWN:
        assert layout.bytes_per_token == KNOWN[repo]
    assert kv_layout(config_of(d), dtype_bytes=1).bytes_per_token * 2 == layout.bytes_per_token  # fp8


def test_windows_as_transformers_reads_them() -> None:
    mistral = kv_layout(config_of(raw("mistralai/Mistral-7B-v0.1")), dtype_bytes=2)
    per_layer = 2 * 8 * 128 * 2
    assert {layer.window for layer in mistral.layers} == {4096}
    assert mistral.bytes_for(1000) == 32 * per_layer * 1000
    assert mistral.bytes_for(32768) == 32 * per_layer * 4096  # every layer capped at its 4,096-token window
    qwen = kv_layout(config_of(raw("Qwen/Qwen2.5-7B")), dtype_bytes=2)  # use_sliding_window: false
    assert qwen.bytes_for(131072) == 131072 * by_hand(raw("Qwen/Qwen2.5-7B"))
    # Qwen2 with sliding windows: the first max_window_layers layers full, the rest sliding
    # (Qwen2Config's docstring), here 20 full and 8 sliding of 28.
    swa = kv_layout(config_of(raw("Qwen/Qwen2.5-7B"), use_sliding_window=True, sliding_window=4096, max_window_layers=20),
                    dtype_bytes=2)
    per_layer = 2 * 4 * 128 * 2
    assert [layer.window for layer in swa.layers] == [None] * 20 + [4096] * 8
    assert swa.bytes_for(10000) == per_layer * (20 * 10000 + 8 * 4096)


def test_gemma2_and_gemma3_alternate_sliding_and_full_layers() -> None:
    from transformers import Gemma2Config, Gemma3TextConfig

    # Gemma 2: every other layer slides (even ones), window 4096; Gemma 3: five sliding then one full.
    g2 = kv_layout(Gemma2Config(num_hidden_layers=42, num_key_value_heads=8, head_dim=256, sliding_window=4096), dtype_bytes=2)
    per_layer = 2 * 8 * 256 * 2
    assert [layer.kind for layer in g2.layers] == ["sliding", "full"] * 21
    assert g2.bytes_for(8192) == per_layer * (21 * 4096 + 21 * 8192)
    g3 = kv_layout(Gemma3TextConfig(num_hidden_layers=12, num_key_value_heads=4, head_dim=256, sliding_window=1024), dtype_bytes=2)
    per_layer = 2 * 4 * 256 * 2
    assert [layer.kind for layer in g3.layers] == (["sliding"] * 5 + ["full"]) * 2
    assert g3.bytes_for(1000) == 12 * per_layer * 1000
    assert g3.bytes_for(100_000) == per_layer * (10 * 1024 + 2 * 100_000)


def prefill_cache_bytes(config: Any, batch: int, seq: int) -> int:
    """The KV cache of a transformers prefill as the simulator sees it (fake tensors, CPU kernels)."""
    from transformers import AutoModelForCausalLM

    from estimator.peak.inputs.providers import workload_for
    from estimator.peak.sim.materialize import materialize
    from estimator.peak.sim.steps import AFTER, simulate_step

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    fake_mode = FakeTensorMode(static_shapes=True)
    materialize(model, fake_mode)
    step = simulate_step(model, workload_for(model, batch_size=batch, seq_len=seq), fake_mode, mode="inference", device="cpu")
    return step.phases[AFTER + "prefill"].components["kv_cache"]


TWO_LAYERS = [r for r in PUBLISHED if r not in ("openai-community/gpt2", "bigscience/bloom")]


@pytest.mark.parametrize("repo", TWO_LAYERS)
def test_prefill_cache_equals_bytes_per_token(repo: str) -> None:
    d = raw(repo)
    layers = {"num_hidden_layers": 2}
    if "kv_lora_rank" in d:  # DeepSeek: its first 3 layers are dense; keep the MoE small for speed
        layers.update(first_k_dense_replace=1, n_routed_experts=4, num_experts_per_tok=2, n_group=1, topk_group=1)
    config = config_of(d, **layers)
    batch, seq = 2, 48  # shorter than every window here: sliding layers hold the whole prompt
    layout = kv_layout(config, dtype_bytes=2)
    expected = batch * layout.bytes_for(seq)
    # A sliding layer of transformers' cache also holds its window as an int64 tensor (8 bytes).
    window_tensors = 8 * sum(layer.window is not None for layer in layout.layers)
    assert prefill_cache_bytes(config, batch, seq) == expected + window_tensors
    if "kv_lora_rank" in d:  # 2 layers x (512 + 64) x 2 bytes per token
        assert expected == batch * seq * 2 * 576 * 2


def test_transformers_keeps_the_whole_prompt_of_a_sliding_layer_after_prefill() -> None:
    """``DynamicSlidingWindowLayer.update`` keeps a view of the last ``window - 1`` tokens of the
    concatenation, whose storage holds the whole prompt: after a prefill longer than the window,
    transformers' cache is not capped (vLLM's is; see docs/serving.md)."""
    config = config_of(raw("mistralai/Mistral-7B-v0.1"), num_hidden_layers=2, sliding_window=16)
    layout = kv_layout(config, dtype_bytes=2)
    assert prefill_cache_bytes(config, 1, 40) == layout.bytes_per_token * 40 + 2 * 8 > layout.bytes_for(40) + 2 * 8


def test_recurrent_layers_keep_a_state_and_unplanned_ones_are_refused() -> None:
    """Qwen3-Next's gated DeltaNet layers keep a per-request state (tests/test_serving_states.py checks its bytes);
    MiniMax's lightning attention, whose vLLM state is not modelled, is refused with the kinds that are."""
    from transformers import MiniMaxConfig, Qwen3NextConfig

    from estimator.errors import UnsupportedError

    layout = kv_layout(Qwen3NextConfig(num_hidden_layers=4), dtype_bytes=2)
    assert [layer.kind for layer in layout.layers] == ["mamba", "mamba", "mamba", "full"]
    assert layout.state_bytes == 3 * layout.recurrent[0].state_bytes > 0
    with pytest.raises(UnsupportedError, match="not planned yet"):
        kv_layout(MiniMaxConfig(num_hidden_layers=2, layer_types=["linear_attention", "full_attention"]), dtype_bytes=2)
