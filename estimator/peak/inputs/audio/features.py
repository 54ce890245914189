"""Audio inputs as the model's own feature extractor makes them, from the repo's preprocessor_config.json
or, without one, from settings read off the model config.

Speech models get the feature extractor's ``input_features`` (or ``input_values``) for random audio of
the length asked (Whisper's extractor pads to its 30 s window). The encoder-decoder ones here
(:data:`SPEECH`) run ``generate``'s steps; encoders, CTC, audio-classification and transducer models
run one forward (:mod:`estimator.peak.inputs.audio.encoders`). The class comes from transformers by
``model_type``; nothing here runs a repository's code.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from estimator.peak.inputs.prompts.family import TEXT_ID, Media, MediaInputs
from estimator.peak.inputs.prompts.media import media_workload
from estimator.peak.inputs.registry import audio_functions, audio_maker, audio_types

__all__ = ["SPEECH", "Speech", "audio_inputs", "audio_simulated", "audio_workload", "simulated_audio_types", "speech_inputs"]


@dataclass(frozen=True)
class Speech:
    """How one speech model type's feature extractor is built from its config, for repos without a
    preprocessor_config.json, and the input it makes."""

    extractor: Callable[[Any], dict[str, Any]]
    input_name: str = "input_features"


# model_type -> its feature extractor; these are the encoder-decoder speech models simulated with audio.
SPEECH: dict[str, Speech] = {
    "whisper": Speech(lambda config: {"feature_size": config.num_mel_bins}),
    "speech_to_text": Speech(lambda config: {"feature_size": config.input_feat_per_channel,
                                             "num_mel_bins": config.input_feat_per_channel}),
    "moonshine": Speech(lambda config: {"feature_size": 1, "sampling_rate": 16000, "do_normalize": False,
                                        "return_attention_mask": True}, "input_values"),
    # Parakeet-encoder models (mel bins of the encoder); SeamlessM4T's stacked filterbanks (2 frames per vector)
    "canary": Speech(lambda config: {"feature_size": config.encoder_config.num_mel_bins}),
    "cohere_asr": Speech(lambda config: {"feature_size": config.encoder_config.num_mel_bins}),
    "seamless_m4t": Speech(lambda config: {"feature_size": config.feature_projection_input_dim // 2,
                                           "num_mel_bins": config.feature_projection_input_dim // 2}),
    "seamless_m4t_v2": Speech(lambda config: {"feature_size": config.feature_projection_input_dim // 2,
                                              "num_mel_bins": config.feature_projection_input_dim // 2}),
    "speecht5": Speech(lambda config: {"feature_size": 1, "return_attention_mask": True}, "input_values"),
}


def audio_inputs(config: Any, media: Media, *, batch_size: int, text_len: int, seed: int = 0) -> MediaInputs:
    """The audio inputs of ``batch_size`` clips of ``media.audio_seconds`` (and ``text_len`` text tokens), made by the
    maker :data:`estimator.peak.inputs.registry.AUDIO` names for the config's model type."""
    model_type = getattr(config, "model_type", "")
    maker = audio_maker(model_type)
    if maker is None:
        raise ValueError(f"audio is not simulated for {model_type or type(config).__name__} models")
    inputs, _ = audio_functions(maker)
    return inputs(config, media, batch_size=batch_size, text_len=text_len, seed=seed)


def speech_inputs(config: Any, media: Media, *, batch_size: int, text_len: int, seed: int = 0) -> MediaInputs:
    """The feature extractor's inputs of an encoder-decoder of :data:`SPEECH` for ``batch_size`` clips of ``media.audio_seconds``
    of random audio (None: the extractor's window, Whisper's 30 s; else 10 s), and ``text_len`` decoder tokens as labels
    (training) — the extractor pads or truncates as it does for real audio (Whisper: to 30 s)."""
    from transformers.models.auto.feature_extraction_auto import FEATURE_EXTRACTOR_MAPPING_NAMES, feature_extractor_class_from_name

    model_type = getattr(config, "model_type", "")
    speech = SPEECH[model_type]
    cls = feature_extractor_class_from_name(FEATURE_EXTRACTOR_MAPPING_NAMES[model_type])
    settings = media.preprocessor or speech.extractor(config)
    extractor = cls(**{k: v for k, v in settings.items() if k not in ("feature_extractor_type", "processor_class")})
    rate = int(extractor.sampling_rate)
    window = getattr(extractor, "chunk_length", None)
    seconds = media.audio_seconds or (float(window) if window else 10.0)
    rng = np.random.default_rng(seed)
    clips = [(0.1 * rng.standard_normal(int(seconds * rate))).astype(np.float32) for _ in range(batch_size)]
    out = extractor(clips, sampling_rate=rate, return_tensors="pt")
    tensors = {k: v for k, v in out.items() if isinstance(v, torch.Tensor) and k in (speech.input_name, "attention_mask")}
    if model_type == "whisper":
        tensors.pop("attention_mask", None)  # Whisper's generate takes the padded 30 s window, no mask
    vocab = int(getattr(config, "vocab_size", 1000))
    tensors["labels"] = torch.from_numpy(rng.integers(TEXT_ID, max(vocab, TEXT_ID + 1), (batch_size, text_len))).long()
    shapes = ", ".join(f"{k} {'x'.join(map(str, v.shape))}" for k, v in tensors.items() if k != "labels")
    words = (f"{seconds:g} s of audio at {rate} Hz per sample ({type(extractor).__name__}; {shapes}); "
             f"training labels: {text_len} decoder tokens")
    return MediaInputs(tensors, words)


def audio_simulated(model_type: str) -> bool:
    """Whether ``model_type`` is fed audio made by its feature extractor (else: refused with ``--audio-seconds``)."""
    maker = audio_maker(model_type)
    return maker is not None and (maker.simulated is None or bool(getattr(importlib.import_module(maker.module), maker.simulated)(model_type)))


def audio_workload(model: Any, inputs: MediaInputs) -> Any:
    """The workload of a speech model on its ``inputs``, as :data:`estimator.peak.inputs.registry.AUDIO` says: one forward
    (and the model's own loss) for encoders, CTC, classifiers and transducers, Pop2Piano's mel conditioner then ``generate``,
    else ``generate``'s steps (:func:`estimator.peak.inputs.prompts.media.media_workload`)."""
    maker = audio_maker(getattr(model.config, "model_type", ""))
    if maker is None:
        return media_workload(model, inputs)
    _, workload = audio_functions(maker)
    return workload(model, inputs)


def simulated_audio_types() -> list[str]:
    """The model types fed audio, for messages."""
    return sorted(audio_types())
