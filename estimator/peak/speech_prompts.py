"""Audio prompts of speech-language models whose processor cannot be run here, shaped by transformers' own code.

- **Voxtral**: ``VoxtralProcessor`` tokenizes with mistral-common's tokenizer file (``tekken.json``), which a
  config-only folder does not have. Its audio path is transformers' own and is run as is:
  ``VoxtralProcessor._retrieve_input_features`` with the ``WhisperFeatureExtractor`` transformers maps Voxtral
  to (``num_mel_bins`` of the audio config) and the processor's audio kwargs (padding to a multiple of 480,000
  samples: whole 30 s chunks), which returns ``input_features`` (chunks, mels, 3000). The prompt is the one
  mistral-common's transcription request writes: BOS, ``[INST]``, ``[BEGIN_AUDIO]``, one ``[AUDIO]`` token
  (``audio_token_id``) per audio embedding the model makes of a chunk (the encoder's 1500 positions of a 3000-frame
  chunk, regrouped by ``intermediate_size / hidden_size`` = 4 for the projector: 375), then the text and
  ``[/INST]``.

The text words are one token each, as with the stand-in tokenizers of :mod:`estimator.peak.family`; nothing
runs a repository's code.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from estimator.peak.family import _TEXT_ID, Media, MediaInputs

__all__ = ["SPEECH_PROMPT_TYPES", "speech_prompt_inputs"]

SPEECH_PROMPT_TYPES = frozenset({"voxtral"})
_VOXTRAL_AUDIO = {"sampling_rate": 16000, "padding": True, "truncation": False, "pad_to_multiple_of": 480000}
_VOXTRAL_CHUNK = 3000  # VoxtralProcessor's max_source_positions: mel frames per 30 s chunk


def speech_prompt_inputs(config: Any, media: Media, *, batch_size: int, text_len: int, seed: int = 0) -> MediaInputs:
    """``batch_size`` prompts of one clip of ``media.audio_seconds`` (default 30 s) and ``text_len`` text words."""
    if getattr(config, "model_type", "") != "voxtral":
        raise ValueError(f"audio prompts are not simulated for {getattr(config, 'model_type', '')} models")
    return _voxtral(config, media, batch_size, text_len, seed)


def _voxtral(config: Any, media: Media, b: int, text_len: int, seed: int) -> MediaInputs:
    from transformers import VoxtralProcessor, WhisperFeatureExtractor

    audio = config.audio_config
    settings = media.preprocessor or {"feature_size": int(audio.num_mel_bins)}
    extractor = WhisperFeatureExtractor(**{k: v for k, v in settings.items() if k not in ("feature_extractor_type", "processor_class")})
    rate = int(extractor.sampling_rate)
    seconds = float(media.audio_seconds or 30.0)
    rng = np.random.default_rng(seed)
    clips = [(0.1 * rng.standard_normal(int(seconds * rate))).astype(np.float32) for _ in range(b)]
    features = VoxtralProcessor._retrieve_input_features(SimpleNamespace(feature_extractor=extractor),  # type: ignore[arg-type]
                                                         clips, _VOXTRAL_CHUNK, **_VOXTRAL_AUDIO, return_tensors="pt")
    chunks = features.shape[0] // b
    per_chunk = (_VOXTRAL_CHUNK // 2) * int(audio.hidden_size) // int(audio.intermediate_size)
    tokens = chunks * per_chunk
    text = config.text_config
    bos = int(getattr(text, "bos_token_id", None) or 1)
    inst, begin, end = _free_ids(config, 3)
    row = [bos, inst, begin, *([int(config.audio_token_id)] * tokens), *([_TEXT_ID] * text_len), end]
    ids = torch.tensor([row] * b, dtype=torch.long)
    tensors = {"input_ids": ids, "input_features": features}
    shapes = ", ".join(f"{k} {'x'.join(map(str, v.shape))}" for k, v in tensors.items())
    words = (f"{seconds:g} s of audio at {rate} Hz per prompt, {tokens} audio tokens + {text_len} text tokens "
             f"(VoxtralProcessor's audio path, {type(extractor).__name__}: {chunks} chunk{'s' if chunks != 1 else ''} of 30 s; "
             f"{shapes})")
    return MediaInputs(tensors, words)


def _free_ids(config: Any, n: int) -> list[int]:
    """``n`` ids of the text vocabulary that are neither a configured special token nor the text word (the
    instruction tokens mistral-common writes; their values do not change the memory)."""
    taken = {_TEXT_ID, int(config.audio_token_id)}
    taken |= {v for k, v in vars(config.text_config).items() if k.endswith("token_id") and isinstance(v, int)}
    return [i for i in range(_TEXT_ID + 1, int(config.text_config.vocab_size)) if i not in taken][:n]
