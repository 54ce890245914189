"""Who makes each model's inputs, on one page: the ordered input providers, and which model types are fed images, video or audio.

Two tables, read lazily (a provider's module is imported the first time it is asked, as vLLM's
``model_executor/models/registry.py`` and ``torch.utils.flop_counter``'s ``flop_registry`` keep theirs):

- :data:`PROVIDERS`: what :func:`estimator.peak.inputs.providers.workload_for` asks, in order, for the step of a model
  given as a model (a model type alone cannot say it: a vision tower asked alone, a codec known by its feature
  extractor, ``Mask2FormerModel`` beside OneFormer's classes). The first that knows the model answers; the generic
  paths (:mod:`estimator.peak.inputs.generic`: token ids, images, video, patch towers) answer the rest. The order matters.
- :data:`MEDIA`: the model types whose prompts carry images, video or audio made by their own processor or feature
  extractor, and the module that makes them (from the family tables: :data:`estimator.peak.inputs.prompts.processors.FAMILIES`
  and the families of ``image_families`` / ``more_families``; ``VIDEO_PLACEHOLDERS`` of ``prompts.video``; the speech
  tables of ``audio.features``, ``audio.prompts``, ``audio.speech_prompts`` and ``audio.encoders``). One place answers
  "is X simulated with images / video / audio?" for the CLI and the page (:func:`estimator.peak.rows.media_request`),
  the engine (:func:`estimator.peak.engine.pick_workload`) and the coverage bench. ``tests/test_input_registry.py``
  keeps it equal to the family tables.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from functools import cache
from typing import Any

__all__ = ["AUDIO", "MEDIA", "PROVIDERS", "AudioMaker", "Modality", "Provider", "audio_functions", "audio_maker", "audio_types", "media_makers", "modality_of", "provider_functions", "simulated_with", "types_with"]


class Modality(str, Enum):
    IMAGES = "images"
    VIDEO = "video"
    AUDIO = "audio"


@dataclass(frozen=True)
class Provider:
    """One input provider: ``module``'s ``workload(model, *, batch_size, seq_len, image_size)`` (None where it does
    not know the model) and what the models it knows are fed."""

    module: str
    takes: str


_INPUTS = "estimator.peak.inputs"

# Asked in this order; the first that knows the model makes its workload (the generic paths answer the rest).
PROVIDERS: tuple[Provider, ...] = (
    Provider(f"{_INPUTS}.vision.pair_more", "images with what is not text beside them: NaFlex patches, Q-Former queries, OmDet "
             "boxes, UDOP's layout, PI0's actions (vision.pi0)"),
    Provider(f"{_INPUTS}.vision.pair", "a text and an image (or audio: audio.pair_audio) tower side by side: CLIP-like pairs, "
             "detectors with text queries"),
    Provider(f"{_INPUTS}.vision.sam", "the SAM family: an image and a point prompt through its processor; video trackers "
             "(vision.sam_video)"),
    Provider(f"{_INPUTS}.vision.more_models", "DepthPro, Mask2Former, OneFormer, Grounding DINO, EfficientLoFTR: their image "
             "processor's tensors"),
    Provider(f"{_INPUTS}.vision.models", "detectors and vision towers asked alone: their image processor's tensors"),
    Provider(f"{_INPUTS}.other.workloads", "audio codecs (their feature extractor), text-to-speech (audio.tts), streaming "
             "speech (audio.stream_speech), time series and others (other.models)"),
    Provider(f"{_INPUTS}.other.series", "the probabilistic time-series transformers: past values, time features, lags"),
    Provider(f"{_INPUTS}.other.encoders", "Longformer, I-BERT, GLM-Image's VQ-VAE: token ids whose values the model asks about"),
    Provider(f"{_INPUTS}.other.protein", "Evolla: a protein in SaProt's tokens and the chat text"),
)

# modality -> (the module that tells which model types it feeds, the predicate there, the module making the inputs)
MEDIA: dict[Modality, tuple[str, str, str]] = {
    Modality.AUDIO: (f"{_INPUTS}.audio.features", "audio_simulated", f"{_INPUTS}.audio.features"),
    Modality.IMAGES: (f"{_INPUTS}.prompts.processors", "images_simulated", f"{_INPUTS}.prompts.processors"),
    Modality.VIDEO: (f"{_INPUTS}.prompts.video", "video_simulated", f"{_INPUTS}.prompts.processors"),
}


@dataclass(frozen=True)
class AudioMaker:
    """Who makes the audio inputs of the model types of ``module``'s table ``types`` (module-level set or dict), and runs them:
    ``module.inputs(config, media, *, batch_size, text_len, seed)`` and ``workload(model, inputs)`` ("module:function");
    ``simulated`` names a predicate of ``module`` a type must also pass (a feature extractor transformers can build here)."""

    module: str
    types: str
    inputs: str
    workload: str
    simulated: str | None = None


_MEDIA_WORKLOAD = f"{_INPUTS}.prompts.media:media_workload"  # generate's steps on the processor's inputs

# Speech and audio-language models, by the table that names them (disjoint tables; ``tests/test_input_registry.py``).
AUDIO: tuple[AudioMaker, ...] = (
    AudioMaker(f"{_INPUTS}.audio.prompts", "PROMPT_TYPES", "prompt_inputs", _MEDIA_WORKLOAD),  # audio + text prompts (Qwen2-Audio...)
    AudioMaker(f"{_INPUTS}.audio.speech_prompts", "SPEECH_PROMPT_TYPES", "speech_prompt_inputs", _MEDIA_WORKLOAD),  # Voxtral, Granite Speech
    AudioMaker(f"{_INPUTS}.audio.pop2piano", "POP2PIANO_TYPES", "pop2piano_inputs", f"{_INPUTS}.audio.pop2piano:pop2piano_workload"),
    AudioMaker(f"{_INPUTS}.audio.features", "SPEECH", "speech_inputs", _MEDIA_WORKLOAD),  # encoder-decoders: Whisper, Moonshine...
    AudioMaker(f"{_INPUTS}.audio.encoders", "FORWARD_TYPES", "forward_audio_inputs", f"{_INPUTS}.audio.encoders:forward_audio_workload",
               "forward_simulated"),  # encoders, CTC, audio classification, transducers: one forward
)


def _function(path: str) -> Callable[..., Any]:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def audio_maker(model_type: str) -> AudioMaker | None:
    """The entry of :data:`AUDIO` whose table names ``model_type`` (its feature extractor need not be buildable)."""
    return next((m for m in AUDIO if model_type in getattr(importlib.import_module(m.module), m.types)), None)


def audio_functions(maker: AudioMaker) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """``(inputs, workload)`` of one :data:`AUDIO` entry."""
    return getattr(importlib.import_module(maker.module), maker.inputs), _function(maker.workload)


def audio_types() -> set[str]:
    """Every model type fed audio: the :data:`AUDIO` tables' types that pass their entry's predicate."""
    found: set[str] = set()
    for maker in AUDIO:
        module = importlib.import_module(maker.module)
        check = getattr(module, maker.simulated) if maker.simulated else None
        found.update(t for t in getattr(module, maker.types) if check is None or check(t))
    return found


_TYPES = {Modality.AUDIO: "simulated_audio_types", Modality.IMAGES: "simulated_image_types", Modality.VIDEO: "simulated_video_types"}


@cache
def provider_functions() -> tuple[Callable[..., Any], ...]:
    """The ``workload`` function of each of :data:`PROVIDERS`, in order (imported on first use)."""
    return tuple(importlib.import_module(p.module).workload for p in PROVIDERS)


def simulated_with(model_type: str, modality: Modality) -> bool:
    """Whether prompts of ``model_type`` can carry ``modality`` made by the model's own processor or feature extractor."""
    module, predicate, _ = MEDIA[modality]
    return bool(getattr(importlib.import_module(module), predicate)(model_type))


def types_with(modality: Modality) -> list[str]:
    """The model types fed ``modality``, sorted (for messages)."""
    module, _, _ = MEDIA[modality]
    return list(getattr(importlib.import_module(module), _TYPES[modality])())


def modality_of(model_type: str) -> Modality | None:
    """What a prompt of ``model_type`` carries besides text by default: audio for speech models (a type fed both is
    simulated with audio), else images for vision-language models, else None (text, or the inputs of :data:`PROVIDERS`)."""
    for modality in (Modality.AUDIO, Modality.IMAGES):
        if simulated_with(model_type, modality):
            return modality
    return None


def media_makers(modality: Modality) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """``(inputs, workload)`` for a prompt carrying ``modality``: the processor's (or feature extractor's) inputs
    ``inputs(config, media, batch_size=, text_len=)`` and the workload ``workload(model, inputs)`` that runs them."""
    if modality is Modality.AUDIO:
        features = importlib.import_module(f"{_INPUTS}.audio.features")
        return features.audio_inputs, features.audio_workload
    processors, media = importlib.import_module(f"{_INPUTS}.prompts.processors"), importlib.import_module(f"{_INPUTS}.prompts.media")
    return processors.media_inputs, media.media_workload
