"""Prompts of audio language models (audio + text in one prompt), as the model's own processor makes them.

An audio-text-to-text model (Qwen2-Audio, Voxtral, Audio Flamingo 3, Granite Speech...) reads a prompt in
which each clip became the processor's run of audio tokens, beside the feature extractor's features.
``prompt_inputs`` builds them with the transformers processor ``model_type`` maps to, a stand-in tokenizer
that knows its special tokens (as :mod:`estimator.peak.processors` does for images) and the feature
extractor of :mod:`estimator.peak.audio`.
"""

from __future__ import annotations

from typing import Any

from estimator.peak.processors import Media, MediaInputs

__all__ = ["PROMPT_TYPES", "prompt_inputs"]

# model_type -> handled here (filled as each processor is simulated and checked)
PROMPT_TYPES: frozenset[str] = frozenset()


def prompt_inputs(config: Any, media: Media, *, batch_size: int, text_len: int, seed: int = 0) -> MediaInputs:
    """The processor's inputs for ``batch_size`` prompts of one clip of ``media.audio_seconds`` and ``text_len`` text tokens."""
    raise ValueError(f"audio prompts are not simulated for {getattr(config, 'model_type', type(config).__name__)} models")
