"""The input registry (estimator/peak/inputs/registry.py) against the family tables it answers for.

One place answers "is X simulated with images / video / audio?": its answer must be the family tables' own, for every
model type of transformers' registry and every type the tables name; its providers must be importable, in the order
``workload_for`` asks them, each with the provider signature.
"""

from __future__ import annotations

import inspect

from estimator.peak.inputs.audio import encoders, features, prompts, speech_prompts
from estimator.peak.inputs.prompts import image_families, more_families, processors, video
from estimator.peak.inputs.registry import (
    AUDIO,
    PROVIDERS,
    Modality,
    audio_maker,
    audio_types,
    modality_of,
    provider_functions,
    simulated_with,
    types_with,
)


def _tables() -> dict[Modality, set[str]]:
    images = {*processors.FAMILIES, *image_families.image_families(), *more_families.more_families()}
    audio = {*features.SPEECH, "pop2piano", *prompts.PROMPT_TYPES, *speech_prompts.SPEECH_PROMPT_TYPES,
             *(t for t in encoders.FORWARD_TYPES if encoders.forward_simulated(t))}
    return {Modality.IMAGES: images, Modality.AUDIO: audio, Modality.VIDEO: set(video.VIDEO_PLACEHOLDERS)}


def test_the_registry_answers_as_the_family_tables() -> None:
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    tables = _tables()
    everything = set(CONFIG_MAPPING_NAMES).union(*tables.values())
    for modality, types in tables.items():
        assert sorted(types_with(modality)) == sorted(types), modality
        assert {t for t in everything if simulated_with(t, modality)} == types, modality
    assert tables[Modality.VIDEO] <= tables[Modality.IMAGES]  # a video prompt is a vision-language model's
    for t in everything:  # a type fed both (an omni model's thinker) is simulated with audio, as the page and CLI ask
        expected = Modality.AUDIO if t in tables[Modality.AUDIO] else Modality.IMAGES if t in tables[Modality.IMAGES] else None
        assert modality_of(t) is expected, t


def test_the_providers_are_the_ordered_workload_functions() -> None:
    functions = provider_functions()
    assert [f.__module__ for f in functions] == [p.module for p in PROVIDERS]
    for f in functions:
        assert list(inspect.signature(f).parameters)[:4] == ["model", "batch_size", "seq_len", "image_size"], f.__module__
    assert [p.module.rsplit(".", 1)[1] for p in PROVIDERS][:2] == ["pair_more", "pair"]  # pair_more claims before pair


def test_the_audio_makers_are_disjoint_tables_in_order() -> None:
    import importlib

    tables = [set(getattr(importlib.import_module(m.module), m.types)) for m in AUDIO]
    assert all(not (a & b) for i, a in enumerate(tables) for b in tables[i + 1:])  # so the order cannot hide a rule
    assert audio_types() == _tables()[Modality.AUDIO]
    assert audio_maker("whisper") is not None and audio_maker("whisper").inputs == "speech_inputs"
    assert audio_maker("wav2vec2") is not None and audio_maker("wav2vec2").inputs == "forward_audio_inputs"
    assert audio_maker("llama") is None
