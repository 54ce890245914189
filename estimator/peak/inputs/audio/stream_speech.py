"""Inputs of streaming speech-to-text models that read text and audio side by side: Kyutai STT, Voxtral Realtime.

``KyutaiSpeechToTextForConditionalGeneration`` reads, at each position, a text token and one frame of its
Mimi codec's codes (``input_ids`` of shape (B, T, 1 + num_codebooks): the embeddings of the text token and of
every codebook, summed), one position per codec frame (``frame_size`` samples at 24 kHz: 12.5 frames a second).
The audio is :data:`SECONDS` s of random audio through the model's own feature extractor
(``KyutaiSpeechToTextFeatureExtractor``: ``input_values`` and ``padding_mask``).

- inference: ``generate``'s first steps (``KyutaiSpeechToTextForConditionalGeneration.prepare_inputs_for_generation``,
  without an ``audio_window_size`` in the generation config): the codec encodes the whole clip (``codec_model.encode``
  under ``no_grad``: the audio window is the clip's encoded length), then the language model runs one position
  (the BOS text token and the audio BOS frame) with a cache. The later steps each add one position to the cache
  (``frames`` positions in all), which is not simulated;
- training: a forward over the clip's frames with text labels: ``input_ids`` (B, 1 + frames, 1 + num_codebooks),
  the first position the BOS frame, the others the clip's codes (random ids in each codebook's vocabulary) beside
  a text token, and ``labels`` (B, 1 + frames) text tokens.

``VoxtralRealtimeForConditionalGeneration`` adds one audio embedding to each text position (``inputs_embeds +=
audio_embeds``): a position per ``audio_length_per_tok`` mel frames (hop 160: 80 ms). The clip is padded to whole
positions (as mistral-common's tokenizer pads it) and made into ``input_features`` by
``VoxtralRealtimeFeatureExtractor``.

- inference: ``generate``'s first step in offline transcription: the audio tower's convolutional embedder on the
  whole clip (``_prepare_model_inputs``), then the audio tower and the language model on the prompt's positions
  with caches. The prompt is BOS and ``default_num_delay_tokens`` streaming-pad tokens; the left padding
  mistral-common adds before them (its ``tekken.json``'s ``streaming_n_left_pad_tokens``: not in the model
  config) is not known here and left out (a few positions);
- training: the clip's positions with a text token each and text labels (``input_ids``, ``labels`` (B, T)).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from estimator.peak.inputs.generic import ordinary_token
from estimator.peak.inputs.other.models import Found
from estimator.peak.sim.prefill import prefill_kwargs

__all__ = ["SECONDS", "stream_inputs"]

SECONDS = 10.0  # the clip, as other speech models without a window of their own are fed


def stream_inputs(model: nn.Module, batch_size: int, seq_len: int) -> Found | None:
    """The inputs of a streaming speech-to-text model of this module, else None."""
    config: Any = model.config
    model_type = getattr(config, "model_type", "")
    if model_type == "voxtral_realtime":
        return _voxtral_realtime(config, batch_size)
    if model_type != "kyutai_speech_to_text":
        return None
    return _kyutai(config, batch_size)


def _kyutai(config: Any, b: int) -> Found:
    from transformers.models.kyutai_speech_to_text.feature_extraction_kyutai_speech_to_text import (
        KyutaiSpeechToTextFeatureExtractor,
    )

    extractor = KyutaiSpeechToTextFeatureExtractor(sampling_rate=int(config.codec_config.sampling_rate))
    rate = int(extractor.sampling_rate)
    rng = np.random.default_rng(0)
    clips = [(0.1 * rng.standard_normal(int(SECONDS * rate))).astype(np.float32) for _ in range(b)]
    made = extractor(clips, sampling_rate=rate, return_tensors="np")
    samples = int(made["input_values"].shape[-1])
    frames = -(-samples // int(config.frame_size))
    books, vocab = int(config.num_codebooks), int(config.codebook_vocab_size)
    text = ordinary_token(config, int(config.vocab_size))
    ids = np.concatenate([np.full((b, 1 + frames, 1), text, np.int64),
                          rng.integers(0, vocab - 1, (b, 1 + frames, books))], axis=2)
    ids[:, 0, 1:] = int(config.audio_bos_token_id)
    arrays = {"input_ids": ids, "labels": np.full((b, 1 + frames), text, np.int64),
              "input_values": made["input_values"].astype(np.float32), "padding_mask": made["padding_mask"].astype(np.int64)}
    bos = int(config.bos_token_id if config.bos_token_id is not None else text)

    def infer(m: nn.Module, x: dict[str, Any]) -> Any:

        codec: Any = m.codec_model
        codes = codec.encode(x["input_values"]).audio_codes.transpose(1, 2)  # (B, frames, books): the audio window
        first = torch.full((codes.shape[0], 1, 1 + books), int(config.audio_bos_token_id), dtype=torch.long)
        first[:, :, 0] = bos
        out = m(input_ids=first, **prefill_kwargs(m))
        return out, codes

    def train(m: nn.Module, x: dict[str, Any]) -> Any:
        return m(input_ids=x["input_ids"], labels=x["labels"])

    return Found(arrays,
                 f"{SECONDS:g} s of audio at {rate} Hz per sample ({type(extractor).__name__}: input_values "
                 f"{b}x1x{samples}); inference: generate's first steps (the codec encodes the clip into {frames} frames of "
                 f"{books} codes, then one position with a cache; the cache's growth over the {frames} later steps is not "
                 f"simulated); training: input_ids {b}x{1 + frames}x{1 + books} (a text token and the frame's codes per "
                 f"position), labels {b}x{1 + frames}",
                 infer=infer, train=train)


def _voxtral_realtime(config: Any, b: int) -> Found:
    from transformers.models.voxtral_realtime.feature_extraction_voxtral_realtime import VoxtralRealtimeFeatureExtractor

    extractor = VoxtralRealtimeFeatureExtractor(feature_size=int(config.audio_config.num_mel_bins))
    rate, hop, per_token = int(extractor.sampling_rate), int(extractor.hop_length), int(config.audio_length_per_tok)
    samples = -(-int(SECONDS * rate) // (hop * per_token)) * hop * per_token  # whole positions
    rng = np.random.default_rng(0)
    clips = [(0.1 * rng.standard_normal(samples)).astype(np.float32) for _ in range(b)]
    features = extractor(clips, sampling_rate=rate, return_tensors="np")["input_features"].astype(np.float32)
    positions = int(features.shape[-1]) // per_token
    text_config = config.get_text_config()
    text = ordinary_token(text_config, int(text_config.vocab_size))
    arrays = {"input_ids": np.full((b, positions), text, np.int64), "labels": np.full((b, positions), text, np.int64),
              "input_features": features}
    delay, factor = int(config.default_num_delay_tokens), int(config.downsample_factor)
    prompt = 1 + delay

    def infer(m: nn.Module, x: dict[str, Any]) -> Any:

        tower: Any = m.model.audio_tower  # type: ignore[union-attr]
        embedded = tower.embedder(x["input_features"])  # generate's _prepare_model_inputs: the whole clip
        ids = torch.full((embedded.shape[0], prompt), text, dtype=torch.long)
        return m(input_ids=ids, encoder_inputs_embeds=embedded[:, : prompt * factor], num_delay_tokens=delay, **prefill_kwargs(m))

    def train(m: nn.Module, x: dict[str, Any]) -> Any:
        return m(input_ids=x["input_ids"], input_features=x["input_features"], labels=x["labels"], num_delay_tokens=delay)

    return Found(arrays,
                 f"{SECONDS:g} s of audio at {rate} Hz per sample ({type(extractor).__name__}: input_features "
                 f"{b}x{features.shape[1]}x{features.shape[2]}, {positions} positions of {per_token} frames); inference: "
                 f"generate's first step (the embedder on the clip, then {prompt} prompt positions: BOS and {delay} delay "
                 f"tokens; mistral-common's left padding not known here); training: input_ids and labels {b}x{positions}",
                 infer=infer, train=train)
