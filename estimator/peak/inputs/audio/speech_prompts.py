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

- **Granite Speech (and Plus)**: ``GraniteSpeechFeatureExtractor`` computes its log-mel features with torchaudio,
  which has no build for this torch. The extractor is transformers' own and runs as is (its two-frame stacking,
  its projector-window count of audio embeddings, the mask); only torchaudio's ``MelSpectrogram`` is answered by
  the shape stand-in of :mod:`estimator.peak.inputs.audio.shapes` (zeros of ``(n_mels, 1 + samples // hop_length)``:
  the values of a float input do not count in a simulation). Its settings come from the config (``n_mels`` =
  the encoder's ``input_dim`` / 2, the projector's ``window_size`` and ``downsample_rate``); the processor is
  transformers' ``GraniteSpeechProcessor``, which expands ``<|audio|>`` (``audio_token_index``) into one token
  per audio embedding.

- **Higgs Audio V2** (text to speech, with a reference voice): ``HiggsAudioV2Processor`` encodes the reference
  clip with its audio tokenizer, a codec model of its own (``bosonai/higgs-audio-v2-tokenizer``, not in the
  model's repo). Its codes are shaped as that codec makes them: transformers' ``HiggsAudioV2TokenizerConfig`` with
  the checkpoint's acoustic downsampling (8, 5, 4, 2, 3: a hop of 960 samples at 24 kHz), whose ``frame_rate`` (25)
  gives ``ceil(seconds x frame_rate)`` frames of the model's ``num_codebooks`` codes, framed by the stream's BOS and EOS codes and
  laid out by the processor's own ``build_delay_pattern`` (``num_codebooks - 1`` more frames); the prompt is the
  text, then ``<|audio_out_bos|>``, one ``<|AUDIO_OUT|>`` per frame but the delay's last ``num_codebooks - 1``,
  written as the delay token, ``<|audio_eos|>``, and the ``<|audio_out_bos|>`` generation starts from. Training
  labels are the processor's (``output_labels``): the text ids with the audio placeholders masked, and the codes.

The text words are one token each, as with the stand-in tokenizers of :mod:`estimator.peak.inputs.prompts.family`; nothing
runs a repository's code.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from estimator.peak.inputs.audio.shapes import STAND_IN
from estimator.peak.inputs.prompts.family import TEXT_ID, Family, Media, MediaInputs, family_tokenizer

__all__ = ["SPEECH_PROMPT_TYPES", "speech_prompt_inputs"]

SPEECH_PROMPT_TYPES = frozenset({"voxtral", "granite_speech", "granite_speech_plus", "higgs_audio_v2"})
_VOXTRAL_AUDIO = {"sampling_rate": 16000, "padding": True, "truncation": False, "pad_to_multiple_of": 480000}
_HIGGS_RATIOS = [8, 5, 4, 2, 3]  # the acoustic downsampling of Higgs Audio V2's codec checkpoint
_VOXTRAL_CHUNK = 3000  # VoxtralProcessor's max_source_positions: mel frames per 30 s chunk


def speech_prompt_inputs(config: Any, media: Media, *, batch_size: int, text_len: int, seed: int = 0) -> MediaInputs:
    """``batch_size`` prompts of one clip of ``media.audio_seconds`` (default 30 s) and ``text_len`` text words."""
    model_type = getattr(config, "model_type", "")
    if model_type in ("granite_speech", "granite_speech_plus"):
        return _granite(config, media, batch_size, text_len, seed)
    if model_type == "higgs_audio_v2":
        return _higgs(config, media, batch_size, text_len, seed)
    if model_type != "voxtral":
        raise ValueError(f"audio prompts are not simulated for {model_type} models")
    return _voxtral(config, media, batch_size, text_len, seed)


@contextlib.contextmanager
def _mel_stand_in() -> Iterator[None]:
    """torchaudio's ``MelSpectrogram`` answered by its shape (module docstring) in Granite Speech's extractor
    module while the block runs, and the extractor's torchaudio checks with it."""
    from transformers.models.granite_speech import feature_extraction_granite_speech as module

    if hasattr(module, "torchaudio"):  # the real one
        yield
        return
    check = module.requires_backends
    module.torchaudio = STAND_IN
    module.requires_backends = lambda *args, **kwargs: None
    try:
        yield
    finally:
        del module.torchaudio
        module.requires_backends = check


def _granite(config: Any, media: Media, b: int, text_len: int, seed: int) -> MediaInputs:
    from transformers import GraniteSpeechFeatureExtractor, GraniteSpeechProcessor

    settings = media.preprocessor or {"n_mels": int(config.encoder_config.input_dim) // 2,
                                      "projector_window_size": int(config.window_size),
                                      "projector_downsample_rate": int(config.downsample_rate)}
    family = Family(tokens={"<|audio|>": ("audio_token_index", "audio_token_id")}, placeholder="<|audio|>",
                    attributes={"audio_token": "<|audio|>"})
    tokenizer = family_tokenizer(config, family)
    seconds = float(media.audio_seconds or 10.0)
    with _mel_stand_in():
        extractor = GraniteSpeechFeatureExtractor(**{k: v for k, v in settings.items()
                                                     if k not in ("feature_extractor_type", "processor_class")})
        rate = int(extractor.sampling_rate)
        rng = np.random.default_rng(seed)
        clips = [(0.1 * rng.standard_normal(int(seconds * rate))).astype(np.float32) for _ in range(b)]
        proc = GraniteSpeechProcessor(extractor, tokenizer)
        out = proc(text=["<|audio|>" + " a" * text_len] * b, audio=clips, return_tensors="pt")
    tensors = {k: v for k, v in out.items() if isinstance(v, torch.Tensor) and k in ("input_ids", "input_features", "input_features_mask")}
    tokens = int((tensors["input_ids"][0] == tokenizer.convert_tokens_to_ids("<|audio|>")).sum())
    shapes = ", ".join(f"{k} {'x'.join(map(str, v.shape))}" for k, v in tensors.items())
    words = (f"{seconds:g} s of audio at {rate} Hz per prompt, {tokens} audio tokens + {text_len} text tokens "
             f"(GraniteSpeechProcessor, {type(extractor).__name__} with torchaudio's mel spectrogram by its shape; {shapes})")
    return MediaInputs(tensors, words)


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
    row = [bos, inst, begin, *([int(config.audio_token_id)] * tokens), *([TEXT_ID] * text_len), end]
    ids = torch.tensor([row] * b, dtype=torch.long)
    tensors = {"input_ids": ids, "input_features": features}
    shapes = ", ".join(f"{k} {'x'.join(map(str, v.shape))}" for k, v in tensors.items())
    words = (f"{seconds:g} s of audio at {rate} Hz per prompt, {tokens} audio tokens + {text_len} text tokens "
             f"(VoxtralProcessor's audio path, {type(extractor).__name__}: {chunks} chunk{'s' if chunks != 1 else ''} of 30 s; "
             f"{shapes})")
    return MediaInputs(tensors, words)


def _free_ids(config: Any, n: int, text: Any = None) -> list[int]:
    """``n`` ids of the text vocabulary (of ``text``, else the text config) that are neither a configured special
    token nor the text word (tokens a tokenizer writes; their values do not change the memory)."""
    text = text if text is not None else config.text_config
    taken = {TEXT_ID, int(config.audio_token_id)}
    taken |= {v for k, v in {**vars(config), **vars(text)}.items() if k.endswith("token_id") and isinstance(v, int)}
    return [i for i in range(TEXT_ID + 1, int(text.vocab_size)) if i not in taken][:n]


def _higgs(config: Any, media: Media, b: int, text_len: int, seed: int) -> MediaInputs:
    import math

    from transformers import HiggsAudioV2Processor, HiggsAudioV2TokenizerConfig

    # the checkpoints' codec (bosonai/higgs-audio-v2-tokenizer): its acoustic encoder's hop is 960 samples (ratios
    # 8, 5, 4, 2, 3), 25 frames a second at 24 kHz; transformers' default config stops at 4 ratios (75 frames a second)
    codec = HiggsAudioV2TokenizerConfig(acoustic_model_config={"downsampling_ratios": _HIGGS_RATIOS})
    seconds = float(media.audio_seconds or 10.0)
    frames = math.ceil(seconds * codec.frame_rate)
    books = int(config.num_codebooks)
    rng = np.random.default_rng(seed)
    bos, eos = int(config.audio_stream_bos_id), int(config.audio_stream_eos_id)
    codes = torch.from_numpy(rng.integers(0, min(bos, eos), (1, books, frames))).long()  # the codec's codes, below the stream ids
    framed = torch.cat([torch.full((1, books, 1), bos), codes, torch.full((1, books, 1), eos)], dim=2)
    delayed = HiggsAudioV2Processor.build_delay_pattern(SimpleNamespace(audio_stream_bos_id=bos, audio_stream_eos_id=eos),  # type: ignore[arg-type]
                                                        framed)[0].transpose(0, 1)
    n = int(delayed.shape[0])
    audio_eos = _free_ids(config, 1, text=config)[0]
    out_bos, audio, delay = int(config.audio_bos_token_id), int(config.audio_token_id), int(config.audio_delay_token_id)
    row = [*([TEXT_ID] * text_len), out_bos, *([audio] * (n - (books - 1))), *([delay] * (books - 1)), audio_eos, out_bos]
    ids = torch.tensor([row] * b, dtype=torch.long)
    labels = ids.masked_fill((ids == audio) | (ids == out_bos), -100)
    audio_ids = delayed.unsqueeze(0).expand(b, -1, -1).contiguous()
    audio_labels = audio_ids.masked_fill((audio_ids == bos) | (audio_ids == eos), -100)
    tensors = {"input_ids": ids, "audio_input_ids": audio_ids, "audio_input_ids_mask": torch.ones(b, n, dtype=torch.bool),
               "labels": labels, "audio_labels": audio_labels}
    shapes = ", ".join(f"{k} {'x'.join(map(str, v.shape))}" for k, v in tensors.items() if "labels" not in k)
    words = (f"{seconds:g} s of audio at {codec.sample_rate} Hz per prompt (a reference voice: {frames} codec frames of "
             f"{books} codebooks, {n} audio tokens with the delay pattern) + {text_len} text tokens (HiggsAudioV2Processor's "
             f"layout, codes shaped by HiggsAudioV2TokenizerConfig; {shapes})")
    return MediaInputs(tensors, words)
