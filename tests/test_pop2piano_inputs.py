"""Pop2Piano's inputs at the stated tempo equal its feature extractor's own ``__call__`` given those beats."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
import torch
from transformers import Pop2PianoConfig

from estimator.errors import InputError
from estimator.peak.inputs.audio.pop2piano import BPM, pop2piano_features, pop2piano_inputs
from estimator.peak.inputs.prompts.family import Media

fe = importlib.import_module("transformers.models.pop2piano.feature_extraction_pop2piano")  # the real class, not the dummy


@pytest.mark.parametrize("clips", [1, 2])
def test_features_match_the_extractors_call(monkeypatch: pytest.MonkeyPatch, clips: int) -> None:
    """The extractor's ``__call__`` (its beat tracker answered with the tempo's beats; no resampling needed)."""
    extractor = fe.Pop2PianoFeatureExtractor(feature_size=64)
    rate = extractor.sampling_rate
    audio = [np.random.default_rng(i).standard_normal(int(7.3 * rate)).astype(np.float32) for i in range(clips)]
    monkeypatch.setattr(fe, "requires_backends", lambda *a, **k: None)
    monkeypatch.setattr(extractor, "extract_rhythm",
                        lambda audio: (BPM, np.arange(0.0, len(audio) / rate, 60.0 / BPM), None, None, None))
    real = extractor(audio if clips > 1 else audio[0], sampling_rate=[rate] * clips if clips > 1 else rate,
                     return_attention_mask=clips > 1, return_tensors="pt")  # the docs: a mask for batched generation
    ours = pop2piano_features(extractor, audio)
    assert set(ours) == ({"input_features", "attention_mask"} if clips > 1 else {"input_features"})
    for name, tensor in ours.items():
        assert torch.equal(tensor, real[name])


def test_inputs_shapes_and_refusal() -> None:
    config = Pop2PianoConfig(d_model=64)
    made = pop2piano_inputs(config, Media(audio_seconds=10.0), batch_size=1, text_len=8)
    # 20 beats at 120 bpm -> 41 half-beat steps, cut every 2 bars (8 steps): 6 rows of 44 hops of 1024 samples
    assert tuple(made.tensors["input_features"].shape) == (6, 44, 64)
    assert tuple(made.tensors["labels"].shape) == (6, 8)
    assert "10 s of audio at 22050 Hz" in made.description and "120 bpm" in made.description
    with pytest.raises(InputError):
        pop2piano_inputs(config, Media(audio_seconds=0.5), batch_size=1, text_len=8)
