"""Tiny audio-language and speech encoder-decoder models for checking the simulated peak with audio in the prompt.

Each case is ``AutoConfig.for_model(model_type, **overrides)`` with the audio encoder and the language
model shrunk (hidden 32-64, 1-2 layers, a vocabulary of 512 ids), the mel bins and positions the
feature extractor and the processor need kept (Whisper-style encoders: 3000 frames = 1500 positions),
built in float32 with the model's own class. The audio is made by :mod:`estimator.peak.inputs.audio.prompts`
(the real processor and feature extractor, a stand-in tokenizer).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from testkit.multimodal_cases import MM_CASES, MultimodalCase

__all__ = ["AUDIO_CASES", "AUDIO_SECONDS", "all_cases"]


@dataclass(frozen=True)
class _Pop2PianoCase(MultimodalCase):
    """Pop2Piano's ``generate`` reads its composers from the repo's generation_config.json (sweetcocoa/pop2piano:
    composer1..composer21 -> one feature token each); a model built from a config has none, so they are set here."""

    def build_on(self, device: str, dtype: torch.dtype = torch.float32) -> nn.Module:
        model: Any = super().build_on(device, dtype)
        model.generation_config.composer_to_feature_token = {f"composer{i + 1}": i for i in range(model.config.composer_vocab_size)}
        return model


_TEXT = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "vocab_size": 512, "max_position_embeddings": 2048, "head_dim": 16}
_WHISPER_ENCODER = {"d_model": 32, "encoder_layers": 1, "encoder_attention_heads": 2, "encoder_ffn_dim": 64,
                    "num_mel_bins": 80, "max_source_positions": 1500}

AUDIO_CASES: dict[str, MultimodalCase] = {c.name: c for c in [
    MultimodalCase("qwen2_audio", "qwen2_audio", {
        "text_config": {"model_type": "qwen2", **_TEXT},
        "audio_config": {"model_type": "qwen2_audio_encoder", **_WHISPER_ENCODER},
        "audio_token_index": 500}, cls="Qwen2AudioForConditionalGeneration"),
    MultimodalCase("audioflamingo3", "audioflamingo3", {
        "text_config": {"model_type": "qwen2", **_TEXT},
        "audio_config": {"model_type": "audioflamingo3_encoder", "hidden_size": 32, "num_hidden_layers": 1,
                         "num_attention_heads": 2, "intermediate_size": 64, "num_mel_bins": 80, "max_source_positions": 1500},
        "projector_hidden_act": "gelu", "audio_token_id": 500}, cls="AudioFlamingo3ForConditionalGeneration"),
    MultimodalCase("glmasr", "glmasr", {
        "text_config": {"model_type": "llama", **_TEXT},
        "audio_config": {"model_type": "glmasr_encoder", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
                         "num_attention_heads": 2, "num_key_value_heads": 2, "num_mel_bins": 80},
        "audio_token_id": 500}, cls="GlmAsrForConditionalGeneration"),
    # the audio encoder's output_dim is the text model's width (the coverage bench's shrink leaves it at 3584)
    MultimodalCase("qwen3_asr", "qwen3_asr", {
        "text_config": {"model_type": "qwen3", **_TEXT},
        "audio_config": {"model_type": "qwen3_asr_encoder", "d_model": 32, "encoder_layers": 1, "encoder_attention_heads": 2,
                         "encoder_ffn_dim": 64, "num_mel_bins": 80, "output_dim": 64, "downsample_hidden_size": 16},
        "audio_token_id": 500, "pad_token_id": 0}, cls="Qwen3ASRForConditionalGeneration"),
    # FunASR-Nano: LFR fbank frames (its extractor run with the torchaudio stand-in), one audio token per 60 ms frame
    MultimodalCase("fun_asr_nano", "fun_asr_nano", {
        "text_config": {"model_type": "qwen3", **_TEXT},
        "audio_config": {"model_type": "fun_asr_nano_encoder", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                         "num_attention_heads": 4, "num_timestamp_prediction_layers": 1, "hidden_dropout": 0.0,
                         "attention_dropout": 0.0},
        "adaptor_config": {"hidden_size": 64, "intermediate_size": 16, "num_attention_heads": 4, "num_hidden_layers": 2,
                           "projector_hidden_size": 64},
        "audio_token_id": 500}, cls="FunAsrNanoForConditionalGeneration"),
    # raw 16 kHz audio; no pad_token_id (as Moonshine's default config): training passes the decoder inputs
    MultimodalCase("moonshine", "moonshine", {
        "vocab_size": 512, "hidden_size": 64, "intermediate_size": 128, "encoder_num_hidden_layers": 1,
        "decoder_num_hidden_layers": 2, "encoder_num_attention_heads": 4, "decoder_num_attention_heads": 4,
        "encoder_num_key_value_heads": 4, "decoder_num_key_value_heads": 4}, cls="MoonshineForConditionalGeneration"),
    # Pop2Piano: mel frames (feature_size = d_model) cut at the beats of an assumed 120 bpm (estimator.peak.inputs.audio.pop2piano)
    _Pop2PianoCase("pop2piano", "pop2piano", {
        "vocab_size": 512, "d_model": 64, "d_kv": 16, "d_ff": 128, "num_layers": 2, "num_decoder_layers": 2, "num_heads": 4,
        "dropout_rate": 0.0, "decoder_start_token_id": 0}, cls="Pop2PianoForConditionalGeneration"),
]}

# the two clip lengths each case is measured at (seconds): a short clip and a long one within the 30 s window
AUDIO_SECONDS: dict[str, tuple[float, float]] = {"qwen2_audio": (5.0, 20.0), "audioflamingo3": (5.0, 20.0), "moonshine": (5.0, 20.0),
                                                  "glmasr": (5.0, 20.0), "qwen3_asr": (5.0, 20.0),
                                                  "fun_asr_nano": (5.0, 20.0), "pop2piano": (5.0, 20.0)}


def all_cases() -> dict[str, MultimodalCase]:
    """The vision-language and speech cases of :mod:`testkit.multimodal_cases` and the audio-language ones here."""
    return {**MM_CASES, **AUDIO_CASES}
