"""Which layers the int rows quantize, against the libraries' own replacement functions.

The estimate picks layers without importing bitsandbytes; here transformers' and diffusers' own
``replace_with_bnb_linear`` swap the layers of the same meta builds for real, and the names of the
swapped ``Linear8bitLt`` / ``Linear4bit`` modules must be exactly the estimate's targets. (diffusers
quantizes only on a GPU, so its byte totals cannot be loaded here; its layer choice can be checked.)
"""

from __future__ import annotations

import json
from pathlib import Path

import bitsandbytes as bnb
import diffusers
import pytest
import torch
import transformers

from estimator.build.diffusers_models import Component, build_component
from estimator.quant.bnb import bnb_targets

SDXL = Path(__file__).resolve().parents[1] / "estimator" / "source" / "catalog" / "data" / "stabilityai__stable-diffusion-xl-base-1.0"


def _swapped(model: torch.nn.Module) -> set[str]:
    return {name for name, module in model.named_modules() if isinstance(module, (bnb.nn.Linear8bitLt, bnb.nn.Linear4bit))}


@pytest.mark.parametrize("load_in_8bit", [True, False])
def test_diffusers_choice_matches_diffusers_replace(load_in_8bit: bool) -> None:
    from diffusers.quantizers.bitsandbytes.utils import replace_with_bnb_linear

    config = json.loads((SDXL / "unet" / "config.json").read_text())
    config.update(block_out_channels=[32, 64, 64], transformer_layers_per_block=[1, 1, 2], attention_head_dim=[2, 4, 4],
                  layers_per_block=1, cross_attention_dim=64, addition_time_embed_dim=8, projection_class_embeddings_input_dim=80)
    model = build_component(Component("unet", "diffusers", "UNet2DConditionModel", config), torch.float16, model="test")
    targets, kept = bnb_targets(model)
    quant = diffusers.BitsAndBytesConfig(load_in_8bit=load_in_8bit, load_in_4bit=not load_in_8bit)
    replace_with_bnb_linear(model, modules_to_not_convert=list(kept), quantization_config=quant)
    assert set(targets) == _swapped(model) and targets


@pytest.mark.parametrize("architecture", ["LlamaForCausalLM", "BertForMaskedLM", "GPT2LMHeadModel", "T5ForConditionalGeneration"])
def test_transformers_choice_matches_the_quantizer(architecture: str) -> None:
    from transformers.quantizers.quantizer_bnb_4bit import Bnb4BitHfQuantizer

    configs = {
        "LlamaForCausalLM": transformers.LlamaConfig(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, vocab_size=100),
        "BertForMaskedLM": transformers.BertConfig(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, vocab_size=100),
        "GPT2LMHeadModel": transformers.GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=100),
        "T5ForConditionalGeneration": transformers.T5Config(d_model=64, d_ff=96, num_layers=2, num_heads=4, vocab_size=100),
    }
    with torch.device("meta"):
        model = getattr(transformers, architecture)._from_config(configs[architecture], dtype=torch.float16)
    targets, _ = bnb_targets(model)
    Bnb4BitHfQuantizer(transformers.BitsAndBytesConfig(load_in_4bit=True))._process_model_before_weight_loading(model, device_map=None)
    assert set(targets) == _swapped(model) and targets
