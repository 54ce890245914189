"""Prompts of audio language models (audio + text in one prompt), as the model's own processor makes them.

An audio-text-to-text model (Qwen2-Audio, Audio Flamingo 3, GLM-ASR, Qwen3-ASR...) reads a prompt in
which each clip became the processor's run of audio tokens, beside the feature extractor's features.
``prompt_inputs`` builds them with the transformers processor ``model_type`` maps to
(``PROCESSOR_MAPPING_NAMES``), a stand-in tokenizer that knows its special tokens under the ids the
model config gives them (:func:`estimator.peak.inputs.prompts.processors.family_tokenizer`, as for images) and the feature
extractor transformers maps the type to, built from the repo's ``preprocessor_config.json`` or, without
one, from the model config (mel bins...). The processor is run on one clip of random audio per prompt
(``--audio-seconds``; default: the extractor's window, 30 s for Whisper's, else 10 s) and ``text_len``
text words; the audio tokens it expands the clip into count in the prompt.

The speech encoder-decoder (whose feature extractor is its encoder's) gets the features and ``text_len``
decoder tokens as labels (:data:`SEQ2SEQ`); the other encoder-decoders (Whisper, Canary, Cohere ASR,
SeamlessM4T, SpeechT5...) are :data:`estimator.peak.inputs.audio.features.SPEECH` entries. Nothing here runs a repository's code.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from estimator.peak.inputs.audio.shapes import stand_in, torchaudio_class
from estimator.peak.inputs.prompts.family import TEXT_ID, Family, Media, MediaInputs, family_tokenizer

__all__ = ["PROMPT_TYPES", "SEQ2SEQ", "prompt_inputs"]


def _mels(config: Any) -> int:
    audio = getattr(config, "audio_config", None) or getattr(config, "encoder_config", None)
    return int(getattr(audio, "num_mel_bins", 128))


def _whisper(config: Any) -> dict[str, Any]:
    return {"feature_size": _mels(config)}


@dataclass(frozen=True)
class AudioPrompt:
    """How one model type's audio processor is built and prompted.

    ``tokens``: special token -> the config attributes holding its id (empty: any free id);
    ``placeholder``: what the chat template writes in the prompt for one clip;
    ``audio_token``: the token the processor repeats once per audio token;
    ``extractor``: the feature extractor's settings from the model config (no preprocessor_config.json);
    ``processor``: the processor's own settings; ``drop``: processor outputs the model does not take.
    """

    tokens: dict[str, tuple[str, ...]]
    placeholder: str
    audio_token: str
    extractor: Callable[[Any], dict[str, Any]] = _whisper
    processor: Callable[[Any], dict[str, Any]] = lambda config: {}
    drop: tuple[str, ...] = ("attention_mask",)
    attributes: dict[str, str] = field(default_factory=dict)
    extractor_class: str | None = None  # where transformers maps the type to no feature extractor
    # the type whose extractor computes with torchaudio, run with :mod:`estimator.peak.inputs.audio.shapes`' stand-in
    torchaudio: str = ""


_ID = ("audio_token_id", "audio_token_index")

# model_type -> its audio processor; the coverage of this table is what gets audio prompts.
PROMPTS: dict[str, AudioPrompt] = {
    "qwen2_audio": AudioPrompt({"<|AUDIO|>": _ID, "<|audio_bos|>": ("audio_bos_token_id",), "<|audio_eos|>": ("audio_eos_token_id",)},
                               "<|audio_bos|><|AUDIO|><|audio_eos|>", "<|AUDIO|>"),
    "audioflamingo3": AudioPrompt({"<sound>": _ID}, "<sound>", "<sound>"),
    # Audio Flamingo 3's processor and feature extractor, which Music Flamingo's are derived from
    "musicflamingo": AudioPrompt({"<sound>": _ID, "<|sound_bos|>": ("audio_bos_token_id",), "<|sound_eos|>": ("audio_eos_token_id",)},
                                 "<sound>", "<sound>", extractor_class="WhisperFeatureExtractor"),
    "glmasr": AudioPrompt({"<|pad|>": _ID}, "<|pad|>", "<|pad|>"),
    "qwen3_asr": AudioPrompt({"<|audio_pad|>": _ID, "<|audio_start|>": (), "<|audio_end|>": ()},
                             "<|audio_start|><|audio_pad|><|audio_end|>", "<|audio_pad|>",
                             attributes={"audio_bos_token": "<|audio_start|>", "audio_eos_token": "<|audio_end|>"}),
    # FunASR-Nano: its processor's default audio token, one per frame of the extractor's mask (its own LFR fbank defaults)
    "fun_asr_nano": AudioPrompt({"<|object_ref_start|>": _ID}, "<|object_ref_start|>", "<|object_ref_start|>",
                                extractor=lambda config: {}, torchaudio="fun_asr_nano_encoder"),
    "moss_transcribe_diarize": AudioPrompt({"<|audio_pad|>": _ID, "<|audio_start|>": (), "<|audio_end|>": ()},
                                           "<|audio_start|><|audio_pad|><|audio_end|>", "<|audio_pad|>"),
}
# Granite Speech (and Plus) are left out: GraniteSpeechFeatureExtractor needs torchaudio, not installed here,
# so their processor was never run (docs/audio_prompts.md)


def _encoder_extractor(config: Any) -> dict[str, Any]:
    """A speech encoder-decoder's extractor settings: its encoder's mel bins, else raw 16 kHz audio (wav2vec2-like)."""
    encoder = config.encoder
    if getattr(encoder, "num_mel_bins", None):
        return {"feature_size": int(encoder.num_mel_bins)}
    # wav2vec2's checkpoints with layer-norm feature encoders take the mask; group-norm ones are fed no mask
    return {"feature_size": 1, "sampling_rate": 16000,
            "return_attention_mask": getattr(encoder, "feat_extract_norm", "layer") == "layer"}


# encoder-decoder speech models whose feature extractor is their encoder's: model_type -> the encoder's
# model type and the extractor's settings from the config; they get features and ``text_len`` decoder labels
SEQ2SEQ: dict[str, tuple[Callable[[Any], str], Callable[[Any], dict[str, Any]]]] = {
    "speech-encoder-decoder": (lambda config: str(config.encoder.model_type), _encoder_extractor),
}

PROMPT_TYPES: frozenset[str] = frozenset({*PROMPTS, *SEQ2SEQ})


def _extractor(model_type: str, config: Any, settings: dict[str, Any] | None, prompt: AudioPrompt) -> Any:
    """The feature extractor transformers maps ``model_type`` to, from the repo's settings or the config."""
    from transformers.models.auto.feature_extraction_auto import FEATURE_EXTRACTOR_MAPPING_NAMES, feature_extractor_class_from_name

    name = FEATURE_EXTRACTOR_MAPPING_NAMES.get(model_type) or prompt.extractor_class
    cls = torchaudio_class(prompt.torchaudio) if prompt.torchaudio else feature_extractor_class_from_name(str(name)) if name else None
    if cls is None:
        raise ValueError(f"transformers has no feature extractor for {model_type}")
    chosen = settings or prompt.extractor(config)
    return cls(**{k: v for k, v in chosen.items() if k not in ("feature_extractor_type", "processor_class", "auto_map")})


def _clips(seconds: float, rate: int, batch_size: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [(0.1 * rng.standard_normal(int(seconds * rate))).astype(np.float32) for _ in range(batch_size)]


def _seconds(media: Media, extractor: Any) -> float:
    window = getattr(extractor, "chunk_length", None)
    return float(media.audio_seconds or (float(window) if window else 10.0))


def prompt_inputs(config: Any, media: Media, *, batch_size: int, text_len: int, seed: int = 0) -> MediaInputs:
    """The processor's inputs for ``batch_size`` prompts of one clip of ``media.audio_seconds`` and ``text_len`` text tokens."""

    model_type = getattr(config, "model_type", "")
    if model_type in SEQ2SEQ:
        return _seq2seq_inputs(config, media, batch_size=batch_size, text_len=text_len, seed=seed)
    prompt = PROMPTS.get(model_type)
    if prompt is None:
        raise ValueError(f"audio prompts are not simulated for {model_type or type(config).__name__} models")
    with stand_in(prompt.torchaudio):
        return _prompt_inputs(model_type, prompt, config, media, batch_size=batch_size, text_len=text_len, seed=seed)


def _prompt_inputs(model_type: str, prompt: AudioPrompt, config: Any, media: Media, *, batch_size: int, text_len: int,
                   seed: int) -> MediaInputs:
    import transformers
    from transformers.models.auto.processing_auto import PROCESSOR_MAPPING_NAMES

    extractor = _extractor(model_type, config, media.preprocessor, prompt)
    # the prompts are all alike (never padded): the pad token's id is any free one
    family = Family(tokens={**prompt.tokens, "<|stand_in_pad|>": ()}, placeholder=prompt.placeholder,
                    attributes={"audio_token": prompt.audio_token, **prompt.attributes})
    tokenizer = family_tokenizer(config, family)
    tokenizer.pad_token = "<|stand_in_pad|>"
    cls = getattr(transformers, PROCESSOR_MAPPING_NAMES[model_type])
    kwargs = dict(prompt.processor(config))
    if media.processor:
        kwargs.update({k: v for k, v in media.processor.items() if k not in ("processor_class", "auto_map", "chat_template")})
    proc = cls(extractor, tokenizer, **kwargs)
    rate = int(getattr(extractor, "sampling_rate", 16000))
    seconds = _seconds(media, extractor)
    clips = _clips(seconds, rate, batch_size, seed)
    out = proc(text=[prompt.placeholder + " a" * text_len] * batch_size, audio=clips, sampling_rate=rate, return_tensors="pt")
    tensors = {k: v for k, v in out.items() if isinstance(v, torch.Tensor) and k not in prompt.drop}
    for name in getattr(proc, "unused_input_names", []) or []:
        tensors.pop(name, None)
    ids = tensors["input_ids"]
    per_sample = int((ids[0] == tokenizer.convert_tokens_to_ids(prompt.audio_token)).sum())
    shapes = ", ".join(f"{k} {'x'.join(map(str, v.shape))}" for k, v in tensors.items())
    words = (f"{seconds:g} s of audio at {rate} Hz per prompt, {per_sample} audio tokens + {text_len} text tokens "
             f"({type(proc).__name__}, {type(extractor).__name__}; {shapes})")
    return MediaInputs(tensors, words)


def _seq2seq_inputs(config: Any, media: Media, *, batch_size: int, text_len: int, seed: int) -> MediaInputs:
    """The encoder's feature extractor's inputs for ``batch_size`` clips, and ``text_len`` decoder tokens as labels."""
    from transformers.models.auto.feature_extraction_auto import FEATURE_EXTRACTOR_MAPPING_NAMES, feature_extractor_class_from_name

    encoder_type, settings = SEQ2SEQ[config.model_type]
    name = FEATURE_EXTRACTOR_MAPPING_NAMES.get(encoder_type(config))
    cls = feature_extractor_class_from_name(name) if name else None
    if cls is None:
        raise ValueError(f"transformers has no feature extractor for a {encoder_type(config)} encoder")
    chosen = media.preprocessor or settings(config)
    extractor = cls(**{k: v for k, v in chosen.items() if k not in ("feature_extractor_type", "processor_class", "auto_map")})
    rate = int(extractor.sampling_rate)
    seconds = _seconds(media, extractor)
    out = extractor(_clips(seconds, rate, batch_size, seed), sampling_rate=rate, return_tensors="pt")
    keep = (extractor.model_input_names[0], "attention_mask")
    tensors = {k: v for k, v in out.items() if isinstance(v, torch.Tensor) and k in keep}
    vocab = int(getattr(config.get_text_config(decoder=True), "vocab_size", 1000) or 1000)
    labels = np.random.default_rng(seed + 1).integers(TEXT_ID, max(vocab, TEXT_ID + 1), (batch_size, text_len))
    shapes = ", ".join(f"{k} {'x'.join(map(str, v.shape))}" for k, v in tensors.items())
    tensors["labels"] = torch.from_numpy(labels).long()
    words = (f"{seconds:g} s of audio at {rate} Hz per sample ({type(extractor).__name__}; {shapes}); "
             f"training labels: {text_len} decoder tokens")
    return MediaInputs(tensors, words)
