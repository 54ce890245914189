"""The audio half of a text-and-audio dual model's inputs (:mod:`estimator.peak.inputs.vision.pair`).

The shape of ``input_features`` is what the model's own feature extractor makes from a clip of
random audio of its default length, with the extractor set from the model's config:

- CLAP: :class:`~transformers.ClapFeatureExtractor` on ``max_length_s`` (10 s) at 48 kHz, ``num_mel_bins``
  bins; ``truncation="fusion"`` (4 mel channels) where the audio config enables fusion, else
  ``"rand_trunc"`` (1 channel), as the fused and unfused checkpoints' extractors are set; ``is_longer``
  (B, 1), False for a clip of exactly the maximum length.
- CLVP: :class:`~transformers.ClvpFeatureExtractor` on ``default_audio_length`` (6 s) at 22,050 Hz,
  ``feature_size`` = the decoder config's mel bins.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

from estimator.peak.fakes.known_inputs import known
from estimator.peak.workload import model_dtype

__all__ = ["audio_features"]

Maker = Callable[[], dict[str, torch.Tensor]]


def audio_features(model: nn.Module, b: int) -> tuple[str, Maker] | None:
    """Words and a maker for the audio inputs of CLAP or CLVP; None for another model."""
    config: Any = model.config
    dtype = model_dtype(model)
    if config.model_type == "clap":
        from transformers import ClapFeatureExtractor

        audio = config.audio_config
        fusion = bool(getattr(audio, "enable_fusion", False))
        extractor = ClapFeatureExtractor(feature_size=int(audio.num_mel_bins),
                                         truncation="fusion" if fusion else "rand_trunc")
        seconds, rate = float(extractor.max_length_s), int(extractor.sampling_rate)
        made = extractor([_clip(seconds, rate)] * b, sampling_rate=rate, return_tensors="np")
        shape = tuple(made["input_features"].shape)
        longer = np.asarray(made["is_longer"]).reshape(b, 1)

        def make_clap() -> dict[str, torch.Tensor]:

            return {"input_features": torch.randn(shape, dtype=dtype),
                    "is_longer": known(longer.shape, bool(longer.any()), torch.bool)}

        return f"input_features {'x'.join(map(str, shape))} ({seconds:g} s of audio at {rate} Hz) + is_longer", make_clap
    if config.model_type == "clvp":
        from transformers import ClvpFeatureExtractor

        bins = int(getattr(getattr(config, "decoder_config", None), "feature_size", 80) or 80)
        clvp = ClvpFeatureExtractor(feature_size=bins)
        seconds, rate = float(clvp.default_audio_length), int(clvp.sampling_rate)
        shape = tuple(clvp([_clip(seconds, rate)] * b, sampling_rate=rate, return_tensors="np")["input_features"].shape)

        def make_clvp() -> dict[str, torch.Tensor]:
            return {"input_features": torch.randn(shape, dtype=dtype)}

        return f"input_features {'x'.join(map(str, shape))} ({seconds:g} s of audio at {rate} Hz)", make_clvp
    return None


def _clip(seconds: float, rate: int) -> np.ndarray:
    """Random audio in [-0.5, 0.5) of ``seconds`` at ``rate`` (numpy: no tensor, so no fake mode sees it)."""
    return np.random.default_rng(0).uniform(-0.5, 0.5, int(seconds * rate)).astype(np.float32)
