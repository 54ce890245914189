"""A fixed sample of transformers' registry through the coverage bench's own code (testkit.coverage).

Each model type gets its main task class and a small config by the bench's shrinking rule, is built
for real on the CPU (saved and loaded back with ``from_pretrained``, storages counted), and is then
asked through ``estimate()`` on a folder holding only that config.json: the load row must equal the
real build's bytes, and inference and training must be simulated (not the formula fallback, not
null, no error). ``python -m bench.coverage`` runs the whole registry (docs/coverage.md).
"""

from __future__ import annotations

import pytest

from testkit.coverage import CATEGORIES, run_type

SAMPLE = {  # model type -> the category the bench puts it in (at least one per category but "other")
    "llama": "text decoder", "gpt2": "text decoder", "bart": "text decoder", "diffllama": "text decoder", "fsmt": "text decoder",
    "qwen2_5_vl": "VLM", "llava": "VLM", "gemma3": "VLM", "clip": "VLM",
    "audioflamingo3": "speech",
    "bert": "encoder", "roberta": "encoder", "flaubert": "encoder",
    "vit": "vision", "convnext": "vision",
    "mamba": "hybrid/SSM", "lfm2": "hybrid/SSM", "falcon_mamba": "hybrid/SSM",
    "mixtral": "MoE", "qwen2_moe": "MoE", "deepseek_v3": "MoE",
    "canine": "other", "patchtsmixer": "other", "timesformer": "vision",
}


def test_the_sample_covers_every_category() -> None:
    assert set(SAMPLE.values()) == set(CATEGORIES)


@pytest.mark.parametrize("model_type", sorted(SAMPLE))
def test_small_config_is_exact_and_simulated(model_type: str) -> None:
    row = run_type(model_type, seq_len=32)
    assert row["status"] == "done", row.get("skip_reason")
    assert row["category"] == SAMPLE[model_type]
    assert row["load"]["method"] == "exact" and row["load"]["bytes"] == row["truth_bytes"], row["load"]
    for mode in ("inference", "training"):
        entry = row[mode]
        assert entry["status"] == "ok" and entry["method"] == "simulated", (mode, entry)
        assert entry["bytes"] > row["truth_bytes"], (mode, entry)  # the weights are live at the peak, and more


@pytest.mark.parametrize("model_type", ["jamba", "bamba", "qwen3_next"])
def test_shrink_keeps_an_attention_layer_in_a_hybrid(model_type: str) -> None:
    """Two layers of Jamba's default pattern (attention at layer 4) or of Bamba's (attention placed per
    checkpoint) hold no attention layer, and transformers' own ``generate`` fails on such a model
    (``get_seq_length`` on a cache without attention layers); the small config keeps one."""
    import torch

    from testkit.coverage import _is_attention, _layer_kinds, small_config

    small, _, model, level, reason = small_config(model_type)
    assert model is not None, reason
    kinds = _layer_kinds(model.config)
    assert sum(_is_attention(k) for k in kinds) == 1 and not _is_attention(kinds[0]), kinds
    out = model.generate(torch.ones(1, 4, dtype=torch.long), max_new_tokens=2, do_sample=False)
    assert out.shape == (1, 6)


def test_shrink_states_the_experts_per_token_and_the_decoder_vocabulary() -> None:
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from testkit.coverage import shrink

    deepseek = shrink(CONFIG_MAPPING["deepseek_v2"]().to_dict())  # its default has num_experts_per_tok None
    assert deepseek["num_experts_per_tok"] == 2 and deepseek["n_routed_experts"] == 4
    assert shrink(CONFIG_MAPPING["ernie4_5_moe"]().to_dict())["moe_k"] == 2  # not 6 of 4 experts
    marian = shrink(CONFIG_MAPPING["marian"]().to_dict())
    assert marian["decoder_vocab_size"] == marian["vocab_size"] == 1024
    mistral4 = shrink(CONFIG_MAPPING["mistral4"]().to_dict())  # head_dim is the whole query head
    assert mistral4["head_dim"] == mistral4["qk_head_dim"] == 32
    zamba2 = shrink(CONFIG_MAPPING["zamba2"]().to_dict())  # its state and attention widths follow the hidden size
    assert zamba2["mamba_headdim"] * zamba2["n_mamba_heads"] == 2 * zamba2["hidden_size"] == zamba2["attention_hidden_size"]
    rwkv, xlstm = shrink(CONFIG_MAPPING["rwkv"]().to_dict()), shrink(CONFIG_MAPPING["xlstm"]().to_dict())
    assert rwkv["attention_hidden_size"] == rwkv["hidden_size"] and xlstm["embedding_dim"] == xlstm["hidden_size"]
    composite = shrink(CONFIG_MAPPING["encoder-decoder"](encoder=CONFIG_MAPPING["bert"](), decoder=CONFIG_MAPPING["bert"]()).to_dict())
    assert composite["pad_token_id"] == composite["decoder_start_token_id"] == composite["decoder"]["pad_token_id"] == 0
    bailing = shrink(CONFIG_MAPPING["bailing_hybrid"]().to_dict())  # expert groups and linear-attention heads follow
    assert bailing["num_expert_group"] == 1 and bailing["linear_num_heads"] * bailing["linear_head_dim"] == bailing["hidden_size"]


def test_marian_is_asked_as_a_seq2seq_lm() -> None:
    """MarianMTModel is in transformers' seq2seq LM mapping though its name does not end in
    ForConditionalGeneration: its workload feeds decoder ids (asked as a base model it had none and
    the real forward refuses, as the simulation did), and the real model runs it on the CPU."""
    import torch
    import transformers

    from estimator.peak.inputs.generic import detect_kind
    from estimator.peak.inputs.providers import workload_for
    from estimator.peak.workload import ModelKind

    config = transformers.MarianConfig(vocab_size=64, decoder_vocab_size=64, d_model=16, encoder_layers=1, decoder_layers=1,
                                       encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
                                       decoder_ffn_dim=32, pad_token_id=63, decoder_start_token_id=63)
    model = transformers.MarianMTModel(config).eval()
    assert detect_kind(model) is ModelKind.SEQ2SEQ_LM
    with pytest.raises(ValueError, match="decoder_input_ids"):  # what a base-model workload did
        model(input_ids=torch.ones(1, 4, dtype=torch.long))
    work = workload_for(model, seq_len=4)
    with torch.no_grad():
        assert work.infer(model, work.make_inputs()).logits.shape == (1, 1, 64)
    assert work.train_loss(model, work.make_inputs()).ndim == 0
