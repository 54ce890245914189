"""Small architectures for checking the simulated peak against a real CPU run.

Each case builds a tiny model (hidden 64-128, 2 layers, vocab 1000) on a given device, in fp32,
exactly as the estimator builds models on meta: ``cls._from_config(config, dtype=...)`` for
transformers, ``timm.create_model(name, pretrained=False, ...)`` for timm.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

__all__ = ["CASES", "PeakCase"]


@dataclass(frozen=True)
class PeakCase:
    name: str
    what: str  # the feature the case covers
    build: Callable[[], nn.Module]  # builds under the current default device
    batch_size: int = 2
    seq_len: int = 64
    image_size: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # mode -> why the 2% check is expected to fail (a documented, unmodelled effect)
    known_gaps: dict[str, str] = field(default_factory=dict)

    def build_on(self, device: str) -> nn.Module:
        with torch.device(device):
            return self.build()


_SMALL = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
              "vocab_size": 1000, "max_position_embeddings": 256}


def _hf(cls_name: str, config_name: str, **kw: Any) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        import transformers

        config = getattr(transformers, config_name)(**kw)
        return getattr(transformers, cls_name)._from_config(config, dtype=torch.float32)

    return build


def _timm(name: str, **kw: Any) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        import timm

        return timm.create_model(name, pretrained=False, **kw)

    return build


CASES: dict[str, PeakCase] = {
    c.name: c
    for c in [
        PeakCase("llama_gqa", "GQA, untied head",
                 _hf("LlamaForCausalLM", "LlamaConfig", num_key_value_heads=2, **_SMALL)),
        PeakCase("llama_tied", "tied embeddings, MHA",
                 _hf("LlamaForCausalLM", "LlamaConfig", tie_word_embeddings=True, **_SMALL)),
        PeakCase("mistral_swa", "sliding window 32 < seq 64",
                 _hf("MistralForCausalLM", "MistralConfig", num_key_value_heads=2, sliding_window=32,
                     **_SMALL)),
        PeakCase("qwen2_swa", "sliding window on one layer, biases on qkv",
                 _hf("Qwen2ForCausalLM", "Qwen2Config", num_key_value_heads=2, use_sliding_window=True,
                     sliding_window=32, max_window_layers=1, **_SMALL)),
        PeakCase("mixtral_moe", "MoE, 4 experts top-2",
                 _hf("MixtralForCausalLM", "MixtralConfig", num_key_value_heads=2, num_local_experts=4,
                     num_experts_per_tok=2, **_SMALL)),
        PeakCase("gemma_mqa", "MQA (1 kv head), tied",
                 _hf("GemmaForCausalLM", "GemmaConfig", num_key_value_heads=1, head_dim=16, **_SMALL)),
        PeakCase("gpt2", "tied, Conv1D, learned positions",
                 _hf("GPT2LMHeadModel", "GPT2Config", n_embd=64, n_layer=2, n_head=4, vocab_size=1000,
                     n_positions=256)),
        PeakCase("bert_mlm", "encoder, masked LM",
                 _hf("BertForMaskedLM", "BertConfig", hidden_size=64, intermediate_size=128,
                     num_hidden_layers=2, num_attention_heads=4, vocab_size=1000,
                     max_position_embeddings=256)),
        PeakCase("roberta_cls", "encoder, sequence classification",
                 _hf("RobertaForSequenceClassification", "RobertaConfig", hidden_size=64,
                     intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                     vocab_size=1000, max_position_embeddings=256, num_labels=3)),
        PeakCase("t5", "encoder-decoder, relative position bias",
                 _hf("T5ForConditionalGeneration", "T5Config", d_model=64, d_ff=128, d_kv=16,
                     num_layers=2, num_decoder_layers=2, num_heads=4, vocab_size=1000,
                     decoder_start_token_id=0, pad_token_id=0)),
        PeakCase("bart", "encoder-decoder, learned positions",
                 _hf("BartForConditionalGeneration", "BartConfig", d_model=64, encoder_ffn_dim=128,
                     decoder_ffn_dim=128, encoder_layers=2, decoder_layers=2,
                     encoder_attention_heads=4, decoder_attention_heads=4, vocab_size=1000,
                     max_position_embeddings=256)),
        PeakCase("marian", "encoder-decoder whose class is not ...ForConditionalGeneration (seq2seq mapping)",
                 _hf("MarianMTModel", "MarianConfig", d_model=64, encoder_ffn_dim=128, decoder_ffn_dim=128,
                     encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
                     vocab_size=1000, decoder_vocab_size=1000, max_position_embeddings=256, pad_token_id=999,
                     decoder_start_token_id=999)),
        PeakCase("vit", "HF ViT image classification",
                 _hf("ViTForImageClassification", "ViTConfig", hidden_size=64, intermediate_size=128,
                     num_hidden_layers=2, num_attention_heads=4, image_size=64, patch_size=8,
                     num_labels=10),
                 batch_size=4),
        PeakCase("timesformer_video", "video clip (B, T, C, H, W) from config.num_frames",
                 _hf("TimesformerModel", "TimesformerConfig", hidden_size=64, intermediate_size=128,
                     num_hidden_layers=2, num_attention_heads=4, image_size=32, patch_size=8,
                     num_frames=4)),
        PeakCase("qwen2_5_vl_vision", "Qwen2.5-VL vision tower alone: flattened patches + grid_thw, window attention",
                 _hf("Qwen2_5_VisionTransformerPretrainedModel", "Qwen2_5_VLVisionConfig", depth=2, hidden_size=64,
                     intermediate_size=128, num_heads=4, out_hidden_size=64, fullatt_block_indexes=[1]),
                 image_size=112,
                 # within 0.001% on AVX-512 (this project's machines); an xfail only where the error passes 2%
                 known_gaps={"training": "on an AVX2-only CPU (ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2) the "
                                         "real step allocates ~1.5 MB more than on AVX-512 (measured 5,919,892 B vs "
                                         "4,416,764, 2026-11-28): a kernel's AVX2 scratch, not yet located"}),
        PeakCase("patchtst_series", "time series: past_values (B, context_length, channels)",
                 _hf("PatchTSTModel", "PatchTSTConfig", d_model=64, ffn_dim=128, num_hidden_layers=2,
                     num_attention_heads=4, context_length=64, patch_length=8, patch_stride=8,
                     num_input_channels=3)),
        PeakCase("patchtsmixer_series", "time series (MLP mixer): past_values (B, context_length, channels)",
                 _hf("PatchTSMixerModel", "PatchTSMixerConfig", d_model=64, num_layers=2, context_length=64,
                     patch_length=8, patch_stride=8, num_input_channels=3)),
        PeakCase("timm_resnet18", "timm CNN, batch norm",
                 _timm("resnet18", num_classes=10), batch_size=4, image_size=64),
        PeakCase("timm_convnext", "timm ConvNeXt (drop-path), depthwise conv, layer norm",
                 _timm("convnext_atto", num_classes=10, drop_path_rate=0.1), batch_size=4,
                 image_size=64),
    ]
}
