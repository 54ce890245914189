"""Pop2Piano's inputs: audio through its own feature extractor, at a stated tempo.

``Pop2PianoFeatureExtractor`` cuts the audio at the beats essentia's ``RhythmExtractor2013`` finds (and needs
librosa only to resample): the number of rows of ``input_features`` (one per ``num_bars`` bars) depends on
the beats found. Neither library is needed to know the shapes for a known tempo: here the beats are those of
a steady :data:`BPM` beats-per-minute song over the whole clip, and every other step is the extractor's own
code (``interpolate_beat_times``, ``preprocess_mel``, ``mel_spectrogram``, ``pad``) on audio already at its
sampling rate (no resampling). Inference runs ``generate``'s first step as the model's ``generate`` does:
the composer token prepended by ``get_mel_conditioner_outputs``, then the encoder-decoder on those
``inputs_embeds``; training: the forward on ``input_features`` with labels.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch
from torch import nn

from estimator.peak.inputs.prompts.family import TEXT_ID, Media, MediaInputs
from estimator.peak.inputs.prompts.media import encoder_labelled, media_workload
from estimator.peak.sim.prefill import prefill_kwargs

__all__ = ["POP2PIANO_TYPES", "BPM", "pop2piano_features", "pop2piano_inputs", "pop2piano_workload"]

BPM = 120.0  # the assumed tempo: Pop2Piano's beats come from a beat tracker on real music


def pop2piano_features(extractor: Any, clips: list[np.ndarray], bpm: float = BPM) -> dict[str, torch.Tensor]:
    """``extractor(clips)``'s tensors (its ``__call__`` step by step) with the beats of a steady ``bpm`` tempo."""
    from transformers import BatchFeature

    rate = int(extractor.sampling_rate)
    batched = len(clips) > 1
    features, steps, extended = [], [], []
    for audio in clips:
        beat_times = np.arange(0.0, len(audio) / rate, 60.0 / bpm)
        beatsteps = extractor.interpolate_beat_times(beat_times=beat_times, steps_per_beat=2, n_extend=1)
        start, end = int(beatsteps[0] * rate), int(beatsteps[-1] * rate)
        cut, ext = extractor.preprocess_mel(audio[start:end], beatsteps - beatsteps[0])
        mel = extractor.mel_spectrogram(cut.astype(np.float32))
        features.append(np.transpose(np.log(np.clip(mel, a_min=1e-6, a_max=None)), (0, -1, -2)))
        steps.append(beatsteps)
        extended.append(ext)
    out = extractor.pad(BatchFeature({"input_features": features, "beatsteps": steps, "extrapolated_beatstep": extended}),
                        is_batched=batched, return_attention_mask=batched, return_tensors="pt")
    return {k: v for k, v in out.items() if k in ("input_features", "attention_mask")}


POP2PIANO_TYPES = frozenset({"pop2piano"})  # the model types fed audio here

def pop2piano_inputs(config: Any, media: Media, *, batch_size: int, text_len: int, seed: int = 0) -> MediaInputs:
    """``batch_size`` clips of ``media.audio_seconds`` (else 10 s) of random audio through the extractor (the
    repo's preprocessor_config.json, else its defaults), and ``text_len`` decoder tokens as labels."""
    from transformers.models.pop2piano.feature_extraction_pop2piano import Pop2PianoFeatureExtractor

    # without the repo's preprocessor_config.json: the defaults, with one mel bin per model channel (the frames are
    # the encoder's inputs_embeds; sweetcocoa/pop2piano: feature_size 512 = d_model 512)
    settings = {k: v for k, v in (media.preprocessor or {"feature_size": int(config.d_model)}).items()
                if k not in ("feature_extractor_type", "processor_class")}
    extractor = Pop2PianoFeatureExtractor(**settings)
    rate = int(extractor.sampling_rate)
    seconds = media.audio_seconds or 10.0
    if seconds * BPM / 60.0 < 2:
        from estimator.errors import InputError

        raise InputError(f"Pop2Piano needs at least 2 beats of audio ({120.0 / BPM:g} s at the assumed {BPM:g} bpm)")
    rng = np.random.default_rng(seed)
    clips = [(0.1 * rng.standard_normal(int(seconds * rate))).astype(np.float32) for _ in range(batch_size)]
    tensors = pop2piano_features(extractor, clips)
    rows = int(tensors["input_features"].shape[0])
    vocab = int(getattr(config, "vocab_size", 1000))
    tensors["labels"] = torch.from_numpy(rng.integers(TEXT_ID, max(vocab, TEXT_ID + 1), (rows, text_len))).long()
    shapes = ", ".join(f"{k} {'x'.join(map(str, v.shape))}" for k, v in tensors.items() if k != "labels")
    words = (f"{seconds:g} s of audio at {rate} Hz per sample (Pop2PianoFeatureExtractor; beats assumed at a steady "
             f"{BPM:g} bpm, cut every {extractor.num_bars} bars; {shapes}); generate with composer1; "
             f"training labels: {text_len} decoder tokens per row")
    return MediaInputs(tensors, words)


def pop2piano_workload(model: nn.Module, inputs: MediaInputs) -> Any:
    """The speech workload whose inference is ``generate``'s first step after its mel conditioner."""

    workload = media_workload(model, inputs)

    def infer(m: nn.Module, x: dict[str, torch.Tensor]) -> Any:
        features, mask = x["input_features"], x.get("attention_mask")
        config: Any = m.config
        tokens = getattr(m.generation_config, "composer_to_feature_token", None)
        offset = min(tokens.values()) if tokens else 0
        value = tokens["composer1"] if tokens else offset  # the first composer (generate's default, "composer1")
        mel: Any = m.mel_conditioner
        embeds = mel(feature=features, index_value=torch.full((features.shape[0],), value), embedding_offset=offset)
        if mask is not None:
            embeds[~mask[:, 0].bool()] = 0.0
            mask = torch.cat([mask[:, 0].view(-1, 1), mask], dim=1)
        start = int(getattr(config, "decoder_start_token_id", 0) or 0)
        decoder_ids = torch.full((features.shape[0], 1), start, dtype=torch.long)
        kwargs = {"attention_mask": mask} if mask is not None else {}
        with encoder_labelled(m):
            return m(inputs_embeds=embeds, decoder_input_ids=decoder_ids, **kwargs, **prefill_kwargs(m))

    return dataclasses.replace(workload, infer=infer)
