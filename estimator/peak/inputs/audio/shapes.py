"""Audio inputs of speech types whose transformers feature extractor computes its features with torchaudio,
which has no build for the torch this project runs on (2.14), and of a word timestamp encoder fed its parent's
encoder states.

The extractor classes (Granite Speech 5's, Fun-ASR-Nano's, X-Codec 2's, NeuCodec's) are imported from their
transformers modules (``transformers.models.<type>.feature_extraction_<type>``; the top-level name is a
placeholder that refuses to build without torchaudio) and run as they are: their own padding, stacking,
low-frame-rate windows, masks and reshapes make the tensors. Only the few torchaudio calls they make are
answered by :data:`STAND_IN`, which returns zeros of the shape torchaudio returns (the values of a float input
do not count in a simulation: it is a fake tensor there, only its shape and dtype matter):

- ``torchaudio.compliance.kaldi.fbank``: ``(frames, num_mel_bins)``, ``frames = 1 + (samples - window) // shift``
  with ``snip_edges`` (Kaldi's default; ``window`` and ``shift`` in samples from the milliseconds given), else
  ``(samples + shift // 2) // shift``;
- ``torchaudio.transforms.MelSpectrogram``: ``(..., n_mels, 1 + samples // hop_length)`` with ``center`` (its
  default), else ``1 + (samples - n_fft) // hop_length``; ``hop_length`` defaults to ``win_length // 2``;
- ``torchaudio.functional.compute_deltas``: the shape of its input.

The stand-in is set as the extractor module's ``torchaudio`` only while the extractor is built and run
(:func:`stand_in`), and removed after (as is, meanwhile, the torchaudio check transformers' ``@requires`` wraps
NeuCodec's ``__call__`` in).
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from types import ModuleType, SimpleNamespace
from typing import Any

import numpy as np
import torch

from estimator.peak.inputs.prompts.family import Media

__all__ = ["STAND_IN", "STATES_TYPES", "TORCHAUDIO_TYPES", "encoder_states", "stand_in", "torchaudio_class"]


def _fbank(waveform: torch.Tensor, num_mel_bins: int = 23, frame_length: float = 25.0, frame_shift: float = 10.0,
           sample_frequency: float = 16000.0, snip_edges: bool = True, **_: Any) -> torch.Tensor:
    samples = int(waveform.shape[-1])
    window = int(sample_frequency * frame_length * 0.001)
    shift = int(sample_frequency * frame_shift * 0.001)
    snipped = 0 if samples < window else 1 + (samples - window) // shift
    frames = snipped if snip_edges else (samples + shift // 2) // shift
    return torch.zeros((frames, int(num_mel_bins)), dtype=torch.float32)


class _MelSpectrogram:
    def __init__(self, sample_rate: int = 16000, n_fft: int = 400, win_length: int | None = None, hop_length: int | None = None,
                 n_mels: int = 128, center: bool = True, **_: Any) -> None:
        self.n_fft, self.n_mels, self.center = int(n_fft), int(n_mels), center
        self.hop = int(hop_length or (win_length or n_fft) // 2)

    def to(self, *args: Any, **kwargs: Any) -> _MelSpectrogram:
        return self

    def __call__(self, audio: torch.Tensor) -> torch.Tensor:
        samples = int(audio.shape[-1])
        frames = 1 + samples // self.hop if self.center else 1 + (samples - self.n_fft) // self.hop
        return torch.zeros((*audio.shape[:-1], self.n_mels, frames), dtype=torch.float32)


def _compute_deltas(specgram: torch.Tensor, win_length: int = 5, mode: str = "replicate") -> torch.Tensor:
    return torch.zeros_like(specgram)


# torchaudio's calls the extractors make, answered with zeros of torchaudio's output shapes (module docstring)
STAND_IN = SimpleNamespace(compliance=SimpleNamespace(kaldi=SimpleNamespace(fbank=_fbank)),
                           transforms=SimpleNamespace(MelSpectrogram=_MelSpectrogram),
                           functional=SimpleNamespace(compute_deltas=_compute_deltas))

# model_type -> the transformers module (under transformers.models) and class of its feature extractor
_CLASSES = {
    "granite_speech5_ctc": ("granite_speech5.feature_extraction_granite_speech5", "GraniteSpeech5FeatureExtractor"),
    "granite_speech5_encoder": ("granite_speech5.feature_extraction_granite_speech5", "GraniteSpeech5FeatureExtractor"),
    "fun_asr_nano_encoder": ("fun_asr_nano.feature_extraction_fun_asr_nano", "FunAsrNanoFeatureExtractor"),
    "xcodec2": ("xcodec2.feature_extraction_xcodec2", "Xcodec2FeatureExtractor"),
    "neucodec": ("neucodec.feature_extraction_neucodec", "NeuCodecFeatureExtractor"),
}
TORCHAUDIO_TYPES = frozenset(_CLASSES)


def _module(model_type: str) -> ModuleType:
    return importlib.import_module(f"transformers.models.{_CLASSES[model_type][0]}")


def torchaudio_class(model_type: str) -> type:
    """The feature extractor class of ``model_type`` (one of :data:`TORCHAUDIO_TYPES`), from its own module."""
    found: type = getattr(_module(model_type), _CLASSES[model_type][1])
    return found


@contextlib.contextmanager
def stand_in(model_type: str) -> Iterator[None]:
    """:data:`STAND_IN` as the ``torchaudio`` of ``model_type``'s extractor module while the block runs (nothing
    for other types, or where torchaudio is there)."""
    if model_type not in _CLASSES:
        yield
        return
    module = _module(model_type)
    if hasattr(module, "torchaudio"):  # the real one
        yield
        return
    cls: Any = torchaudio_class(model_type)
    call = cls.__dict__.get("__call__")
    checked = getattr(call, "__wrapped__", None)  # NeuCodec's __call__ checks for torchaudio (transformers' @requires)
    module.torchaudio = STAND_IN  # type: ignore[attr-defined]
    if checked is not None:
        cls.__call__ = checked
    try:
        yield
    finally:
        del module.torchaudio
        if checked is not None:
            cls.__call__ = call


# the word timestamp encoder of Nemotron 3.5 Transcribe, fed its parent's ASR encoder states
STATES_TYPES = frozenset({"nemotron3_5_transcribe_word_timestamp"})


def encoder_states(config: Any, media: Media, *, batch_size: int) -> tuple[dict[str, torch.Tensor], str, float]:
    """Nemotron 3.5 Transcribe's word timestamp encoder's inputs: the speech recognition encoder's states of the
    clip (``inputs_embeds`` B x frames x hidden_size, one frame per ``subsampling_factor`` spectrogram frames of the
    parent's feature extractor, padded to whole frames as its processor pads) and the frames' mask, as
    ``Nemotron3_5TranscribeForConditionalGeneration.get_word_timestamp_hidden_states`` passes them. The parent's
    settings are the defaults of its audio config (the word timestamp config holds none); it runs the encoder on
    chunks of ``chunk_length`` frames with their context (40 s of audio and more): one forward here is the run of
    a clip up to that length."""
    from transformers import Nemotron3_5TranscribeAudioConfig
    from transformers.models.nemotron_asr_streaming.feature_extraction_nemotron_asr_streaming import (
        NemotronAsrStreamingFeatureExtractor,
    )

    parent: Any = Nemotron3_5TranscribeAudioConfig()
    settings = {k: v for k, v in (media.preprocessor or {}).items() if k not in ("feature_extractor_type", "processor_class")}
    extractor = NemotronAsrStreamingFeatureExtractor(**(settings or {"feature_size": parent.asr_config.num_mel_bins}))
    rate = int(extractor.sampling_rate)
    seconds = float(media.audio_seconds or 10.0)
    rng = np.random.default_rng(0)
    clips = [(0.1 * rng.standard_normal(int(seconds * rate))).astype(np.float32) for _ in range(batch_size)]
    mask = extractor(clips, sampling_rate=rate, return_tensors="pt")["attention_mask"]
    factor = int(parent.subsampling_factor)
    mask = torch.nn.functional.pad(mask, (0, -mask.shape[1] % factor))[:, ::factor].long()
    states = torch.zeros((batch_size, mask.shape[1], int(config.hidden_size)), dtype=torch.float32)
    words = (f"{seconds:g} s of audio at {rate} Hz per sample: its speech recognition encoder states (inputs_embeds, "
             f"one frame per {factor} spectrogram frames of {type(extractor).__name__}) and their mask")
    return {"inputs_embeds": states, "attention_mask": mask}, words, seconds
