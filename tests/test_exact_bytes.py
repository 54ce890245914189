"""Exactness against independent truth: small models built for real on CPU, storages counted.

For each architecture, a real model is built on the CPU, saved, and loaded back the way a user
loads it — ``from_pretrained(folder, dtype=X)`` for transformers (which keeps T5's ``wo`` in float32
for float16, as ``_from_config`` does not), ``create_model(...).to(X)`` for timm — and the bytes of
its unique parameter and buffer storages are counted. The estimator, which never materialises
anything, must give exactly that number.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from estimator import estimate
from testkit.truth import storage_bytes

TINY = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 1000, "max_position_embeddings": 256}

TRANSFORMERS_CASES: dict[str, dict[str, Any]] = {
    "llama-gqa-untied": {"model_type": "llama", "architectures": ["LlamaForCausalLM"], **TINY, "num_key_value_heads": 2, "tie_word_embeddings": False},
    "llama-tied": {"model_type": "llama", "architectures": ["LlamaForCausalLM"], **TINY, "num_key_value_heads": 4, "tie_word_embeddings": True},
    "gpt2-tied": {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 1000, "n_positions": 128},
    "mistral-sliding-window": {"model_type": "mistral", "architectures": ["MistralForCausalLM"], **TINY, "num_key_value_heads": 2, "sliding_window": 32},
    "mixtral-moe": {"model_type": "mixtral", "architectures": ["MixtralForCausalLM"], **TINY, "num_key_value_heads": 2, "num_local_experts": 4, "num_experts_per_tok": 2},
    "qwen2-moe": {"model_type": "qwen2_moe", "architectures": ["Qwen2MoeForCausalLM"], **TINY, "num_key_value_heads": 2, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 64},
    "gemma-tied": {"model_type": "gemma", "architectures": ["GemmaForCausalLM"], **TINY, "num_key_value_heads": 1, "head_dim": 16},
    "bert-mlm": {"model_type": "bert", "architectures": ["BertForMaskedLM"], **TINY},
    "t5-encoder-decoder": {"model_type": "t5", "architectures": ["T5ForConditionalGeneration"], "d_model": 64, "d_ff": 128, "d_kv": 16, "num_layers": 2, "num_heads": 4, "vocab_size": 1000, "tie_word_embeddings": True},
    "bart-encoder-decoder": {"model_type": "bart", "architectures": ["BartForConditionalGeneration"], "d_model": 64, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 4, "decoder_attention_heads": 4, "encoder_ffn_dim": 128, "decoder_ffn_dim": 128, "vocab_size": 1000, "max_position_embeddings": 128},
    "vit-classifier": {"model_type": "vit", "architectures": ["ViTForImageClassification"], "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "image_size": 64, "patch_size": 16, "num_labels": 10},
    "no-architectures-falls-back-to-automodel": {"model_type": "llama", **TINY, "num_key_value_heads": 2},
}

TIMM_CASES: dict[str, dict[str, Any]] = {
    "timm-resnet18": {"architecture": "resnet18.a1_in1k", "num_classes": 10, "pretrained_cfg": {"input_size": [3, 64, 64]}},
    "timm-convnext-atto": {"architecture": "convnext_atto.d2_in1k", "num_classes": 10, "pretrained_cfg": {"input_size": [3, 64, 64]}},
}


def real_transformers(config: dict[str, Any], dtype: torch.dtype, saved: Path | None = None) -> torch.nn.Module:
    """The model as ``from_pretrained(..., dtype=dtype)`` leaves it (built, saved to ``saved``, loaded back)."""
    import tempfile

    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    hf_config = CONFIG_MAPPING[config["model_type"]].from_dict(dict(config))
    names = config.get("architectures") or []
    cls = getattr(transformers, names[0]) if names else transformers.AutoModel._model_mapping[type(hf_config)]
    folder = saved if saved is not None else Path(tempfile.mkdtemp(prefix="exact_bytes_"))
    if not (folder / "config.json").exists():
        cls._from_config(hf_config, dtype=torch.float32).save_pretrained(folder)
    return cls.from_pretrained(folder, dtype=dtype)


def real_timm(config: dict[str, Any], dtype: torch.dtype) -> torch.nn.Module:
    import timm

    return timm.create_model(config["architecture"], pretrained=False, num_classes=config["num_classes"]).to(dtype)


def folder(tmp_path: Path, config: dict[str, Any]) -> str:
    (tmp_path / "config.json").write_text(json.dumps(config))
    return str(tmp_path)


@pytest.mark.parametrize("case", sorted(TRANSFORMERS_CASES))
def test_transformers_total_bytes_are_exact(case: str, tmp_path: Path) -> None:
    config = TRANSFORMERS_CASES[case]
    result = estimate(folder(tmp_path, config), dtypes=["float32", "bfloat16", "float16"])
    saved = tmp_path / "saved"
    for dtype_name, dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16), ("float16", torch.float16)):
        truth = storage_bytes(real_transformers(config, dtype, saved))
        assert result.row(dtype_name).total_bytes == truth, (case, dtype_name)
        assert result.row(dtype_name).method == "exact"


@pytest.mark.parametrize("case", sorted(TIMM_CASES))
def test_timm_total_bytes_are_exact(case: str, tmp_path: Path) -> None:
    config = TIMM_CASES[case]
    result = estimate(folder(tmp_path, config), dtypes=["float32", "bfloat16"])
    assert result.library == "timm"
    for dtype_name, dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16)):
        assert result.row(dtype_name).total_bytes == storage_bytes(real_timm(config, dtype)), (case, dtype_name)


def test_untied_head_counts_and_tied_weights_count_once(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    untied = estimate(folder(tmp_path / "a", TRANSFORMERS_CASES["llama-gqa-untied"]), dtypes=["float32"])
    tied_config = dict(TRANSFORMERS_CASES["llama-gqa-untied"], tie_word_embeddings=True)
    tied = estimate(folder(tmp_path / "b", tied_config), dtypes=["float32"])
    embedding = TINY["vocab_size"] * TINY["hidden_size"] * 4
    assert untied.row("float32").total_bytes - tied.row("float32").total_bytes == embedding


def test_rotary_inv_freq_stays_float32(tmp_path: Path) -> None:
    """Buffers made in float32 on purpose stay float32 in a bfloat16 load, as from_pretrained leaves them."""
    result = estimate(folder(tmp_path, TRANSFORMERS_CASES["llama-gqa-untied"]), dtypes=["bfloat16"])
    model = real_transformers(TRANSFORMERS_CASES["llama-gqa-untied"], torch.bfloat16)
    assert any(b.dtype == torch.float32 for b in model.buffers())
    params = sum(p.numel() for p in model.parameters()) * 2
    assert result.row("bfloat16").total_bytes > params


def test_training_adam_bytes(tmp_path: Path) -> None:
    """fp32: 4 bytes of weights + 4 of gradients + 8 of AdamW moments per parameter; 16-bit mixed precision: 16 per parameter."""
    config = TRANSFORMERS_CASES["llama-gqa-untied"]
    result = estimate(folder(tmp_path, config), dtypes=["float32", "bfloat16"])
    model = real_transformers(config, torch.float32)
    params = sum(p.numel() for p in model.parameters())
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.zeros(1, 8, dtype=torch.long), labels=torch.zeros(1, 8, dtype=torch.long)).loss.backward()
    optimizer.step()
    states = sum(t.numel() * t.element_size() for s in optimizer.state.values() for t in s.values() if t.dim() > 0)
    grads = sum(p.grad.numel() * p.grad.element_size() for p in model.parameters() if p.grad is not None)
    assert result.row("float32").training_adam_bytes == params * 4 + buffers + grads + states
    assert result.row("bfloat16").training_adam_bytes == params * 16 + buffers


def test_largest_layer_is_accelerates_no_split_group(tmp_path: Path) -> None:
    from accelerate.utils import calculate_maximum_sizes

    config = dict(TRANSFORMERS_CASES["llama-gqa-untied"], vocab_size=100)  # small vocab: a decoder layer is largest
    result = estimate(folder(tmp_path, config), dtypes=["float32"])
    _, (largest, names) = calculate_maximum_sizes(real_transformers(config, torch.float32))
    assert result.row("float32").largest_layer_bytes == largest
    assert names and names[0].startswith("model.layers.")


def test_float8_row_counts_e4m3_weights_and_block_scales(tmp_path: Path) -> None:
    config = dict(TRANSFORMERS_CASES["llama-gqa-untied"], hidden_size=256, intermediate_size=512)
    result = estimate(folder(tmp_path, config), dtypes=["bfloat16", "float8"])
    bf16 = result.row("bfloat16").total_bytes
    fp8 = result.row("float8")
    assert fp8.total_bytes is not None and bf16 is not None and fp8.total_bytes < bf16
    assert fp8.training_adam_bytes is None
    assert any("lm_head" in note for note in fp8.notes)
    # Linear weights of the two decoder layers: q,o 256x256; k,v 128x256 (GQA); gate, up 512x256; down 256x512.
    linear = 2 * (2 * 256 * 256 + 2 * 128 * 256 + 3 * 512 * 256)
    blocks = 2 * (2 * 4 + 2 * 2 + 3 * 8)  # one float32 scale per 128x128 block
    assert bf16 - fp8.total_bytes == linear * 2 - (linear + blocks * 4)
