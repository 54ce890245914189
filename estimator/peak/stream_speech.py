"""Inputs of streaming speech-to-text models that read text and audio codes side by side: Kyutai STT.

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
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from estimator.peak.other_models import Found

__all__ = ["SECONDS", "stream_inputs"]

SECONDS = 10.0  # the clip, as other speech models without a window of their own are fed


def stream_inputs(model: nn.Module, batch_size: int, seq_len: int) -> Found | None:
    """The inputs of a streaming speech-to-text model of this module, else None."""
    config: Any = model.config
    if getattr(config, "model_type", "") != "kyutai_speech_to_text":
        return None
    return _kyutai(config, batch_size)


def _kyutai(config: Any, b: int) -> Found:
    from transformers.models.kyutai_speech_to_text.feature_extraction_kyutai_speech_to_text import (
        KyutaiSpeechToTextFeatureExtractor,
    )

    from estimator.peak.basic_inputs import ordinary_token

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
        from estimator.peak.basic_inputs import prefill_kwargs

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
