"""The trainable-parameter note of a training row (estimator.peak.engine._trainable_note)."""

from __future__ import annotations

import torch
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM

from estimator.peak import engine
from estimator.peak.sim.training import Recipe


def _llama(layers: int) -> torch.nn.Module:
    config = LlamaConfig(hidden_size=128, intermediate_size=344, num_hidden_layers=layers, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=4000)
    with torch.device("meta"):
        return LlamaForCausalLM._from_config(config, dtype=torch.float32)


def test_the_lora_count_is_counted_once_per_config_rank_and_targets() -> None:
    """The fit solver simulates a LoRA step again per shape; the trainable count (peft on a copy of the
    whole model) is kept per model config, rank and targets, and equals peft's own count."""
    engine._LORA_COUNTS.clear()
    first = engine._trainable_note(_llama(8), Recipe(lora_rank=4))
    again = engine._trainable_note(_llama(8), Recipe(lora_rank=4))
    other = engine._trainable_note(_llama(8), Recipe(lora_rank=8))
    assert len(engine._LORA_COUNTS) == 2 and first == again != other
    peft_model = get_peft_model(_llama(8), LoraConfig(r=4))
    assert first == f"{sum(p.numel() for p in peft_model.parameters() if p.requires_grad):,} trainable parameters"
