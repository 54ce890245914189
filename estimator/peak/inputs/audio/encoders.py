"""Speech models that are not generative (encoders, CTC, audio classification, transducers) fed audio
made by their own transformers feature extractor, and their forward-only workload.

- The extractor: the class transformers maps the ``model_type`` to (``FEATURE_EXTRACTOR_MAPPING_NAMES``),
  or, for a sub-model type without one (``qwen2_audio_encoder``, ``gemma3n_audio``...), the class of
  the model type its config module belongs to (the parent model whose processor feeds it). Built from
  the repo's ``preprocessor_config.json`` where given, else from its defaults with the settings the
  model config declares too (mel bins, sampling rate, hop length...), so that its features fit the
  model. It runs on random audio of the length asked (default: the extractor's own window, 30 s for
  Whisper's, else 10 s); the tensors it returns that the model's forward takes are kept (the parent
  model's own names where it renames them, :data:`RENAMED`).
- inference: one forward under ``no_grad`` (a transducer's: the encoder and the first decoder step on
  the blank token, as its greedy decoding starts).
- training: a forward with the model's own loss where its task takes labels (CTC: a transcript of a
  few tokens; audio classification: one class per clip), else the sum of its first output (an
  encoder's hidden states; a transducer's joint logits over its transcript, whose RNN-T loss needs
  torchaudio).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

from estimator.peak.fakes.known_values import KnownValues, known_fakes, known_value
from estimator.peak.inputs.audio.shapes import STATES_TYPES, TORCHAUDIO_TYPES, encoder_states, stand_in, torchaudio_class
from estimator.peak.inputs.prompts.family import TEXT_ID, Media, MediaInputs
from estimator.peak.workload import ModelKind, Workload, first_tensor, model_dtype

__all__ = ["FORWARD_TYPES", "AudioInputs", "AudioWorkload", "Feed", "extractor_class", "feed", "forward_audio_inputs", "forward_audio_workload",
           "forward_simulated", "run_inference", "training_loss"]

# The speech model types simulated here: encoders, CTC and audio-classification models, transducers and the audio
# towers of audio-language models, whose forward reads audio features alone (the generative ones are
# estimator.peak.inputs.audio.features's SPEECH and estimator.peak.inputs.audio.prompts' PROMPT_TYPES).
FORWARD_TYPES = frozenset({
    "audio-spectrogram-transformer", "data2vec-audio", "hubert", "sew", "sew-d", "unispeech", "unispeech-sat", "wavlm",
    "wav2vec2", "wav2vec2-conformer", "wav2vec2-bert", "parakeet_ctc", "parakeet_encoder", "parakeet_rnnt", "parakeet_tdt",
    "lasr_ctc", "lasr_encoder", "granite_speech5_ctc", "granite_speech5_encoder", "audioflamingo3_encoder",
    "fun_asr_nano_encoder", "glmasr_encoder", "qwen2_audio_encoder", "qwen3_asr_encoder", "voxtral_encoder",
    "voxtral_realtime_encoder", "nemotron_asr_streaming", "nemotron_asr_streaming_encoder", "nemotron3_5_asr",
    "nemotron3_5_transcribe_asr_audio", "nemotron3_diarization_audio", "moss_transcribe_diarize_audio", "gemma3n_audio",
    "gemma4_audio", "pe_audio", "pe_audio_encoder", "muse_spark_audio", "nemotron3_diarization", "nemotron3_5_transcribe_audio",
    "nemotron3_5_transcribe_word_timestamp",
})

# model_type -> the extractor its processor uses where transformers' feature-extractor mapping names another:
# Wav2Vec2-BERT reads SeamlessM4T's stacked fbank features (facebook/w2v-bert-2.0's preprocessor_config.json).
EXTRACTOR = {"wav2vec2-bert": "SeamlessM4TFeatureExtractor"}

# model_type -> {extractor output: forward argument}, where the parent model passes them under other names:
# Gemma3nModel calls its audio tower with (input_features, ~input_features_mask) as (audio_mel, audio_mel_mask),
# Gemma4Model with (input_features, input_features_mask) as (input_features, attention_mask).
RENAMED = {
    "gemma3n_audio": {"input_features": "audio_mel", "input_features_mask": "audio_mel_mask"},
    "gemma4_audio": {"input_features_mask": "attention_mask"},
}
INVERTED = {("gemma3n_audio", "input_features_mask")}  # masks the parent passes negated (True: padding)
# types whose processor pads the spectrogram (and its mask) on the right to a multiple of the config's
# subsampling_factor (Nemotron3_5TranscribeProcessor._process_audio)
PAD_TO_SUBSAMPLING = frozenset({"nemotron3_5_transcribe_audio"})

# config field -> extractor setting, where the model config says what features it reads
_FROM_CONFIG = {"num_mel_bins": ("feature_size", "num_mel_bins"), "n_mels": ("feature_size",), "feature_size": ("feature_size",),
                "input_feat_per_channel": ("feature_size",), "sampling_rate": ("sampling_rate",),
                "hop_length": ("hop_length",), "n_fft": ("n_fft",), "max_length": ("max_length",),
                "num_stacked_frames": ("num_frames_lfr",)}
_aten = torch.ops.aten
_ASKED_MASK = "input_features_mask"  # the name processors give the mask they ask for (not returned by default)
_CHARS_PER_SECOND = 15  # a transcript's length for CTC and transducer labels: about 15 characters per second of speech


def extractor_class(model_type: str) -> type | None:
    """The feature extractor class of ``model_type`` (see the module docstring); None where transformers has
    none or it cannot be built here (a backend missing: torchaudio)."""
    return _extractor_class(model_type)


@functools.cache
def _extractor_class(model_type: str) -> type | None:
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    from transformers.models.auto.feature_extraction_auto import FEATURE_EXTRACTOR_MAPPING_NAMES, feature_extractor_class_from_name

    name = EXTRACTOR.get(model_type) or FEATURE_EXTRACTOR_MAPPING_NAMES.get(model_type)
    if name is None and model_type in CONFIG_MAPPING:
        module = CONFIG_MAPPING[model_type].__module__
        name = next((FEATURE_EXTRACTOR_MAPPING_NAMES[t] for t, c in CONFIG_MAPPING.items()
                     if c.__module__ == module and t in FEATURE_EXTRACTOR_MAPPING_NAMES), None)

    if model_type in TORCHAUDIO_TYPES:  # built and run with torchaudio's shapes (estimator.peak.inputs.audio.shapes)
        return torchaudio_class(model_type)
    cls = feature_extractor_class_from_name(name) if name else None
    if cls is None:
        return None
    try:
        cls()  # a class whose backend is missing is a placeholder that raises here
    except ImportError:
        return None
    return cls


def _processor_audio_kwargs(model_type: str) -> dict[str, Any]:
    """The audio settings the type's own transformers processor passes its extractor (``audio_kwargs``:
    LasrProcessor and ParakeetProcessor ask for the attention mask, which LasrForCTC's loss needs)."""
    import transformers
    from transformers.models.auto.processing_auto import PROCESSOR_MAPPING_NAMES

    name = PROCESSOR_MAPPING_NAMES.get(model_type)
    found = getattr(getattr(transformers, name, None), "audio_kwargs", None) if name else None
    return dict(found) if isinstance(found, dict) else {}


def forward_simulated(model_type: str) -> bool:
    """Whether ``model_type`` is simulated here with its feature extractor's audio."""
    return model_type in FORWARD_TYPES and extractor_class(model_type) is not None


def _extractor(config: Any, preprocessor: dict[str, Any] | None) -> Any:
    """The model's feature extractor, from the repo's preprocessor_config.json or the model config."""
    model_type = getattr(config, "model_type", "")
    cls = extractor_class(model_type)
    if cls is None:
        raise ValueError(f"audio is not simulated for {model_type or type(config).__name__} models: no feature extractor "
                         "that transformers can build here")
    if preprocessor:
        return cls(**{k: v for k, v in preprocessor.items() if k not in ("feature_extractor_type", "processor_class")})
    accepted = set(inspect.signature(cls).parameters)
    settings: dict[str, Any] = {}
    # the config, then the audio sub-config that reads the features (Nemotron 3 diarization's audio_config,
    # Nemotron 3.5 Transcribe's asr_config)
    for source in (config, *(getattr(config, n) for n in _AUDIO_SUBCONFIGS if getattr(config, n, None) is not None)):
        declared = set(inspect.signature(type(source).__init__).parameters)  # what the config class itself declares
        for field, targets in _FROM_CONFIG.items():
            value = getattr(source, field, None)
            if field in declared and isinstance(value, (int, float)) and not isinstance(value, bool):
                for target in targets:
                    if target in accepted and (target != "feature_size" or cls().feature_size > 1):  # raw audio stays 1 channel
                        settings.setdefault(target, value)
    return cls(**settings)


_AUDIO_SUBCONFIGS = ("audio_config", "asr_config", "encoder_config")


def forward_audio_inputs(config: Any, media: Media, *, batch_size: int, text_len: int, seed: int = 0) -> MediaInputs:
    """The extractor's tensors for ``batch_size`` clips of ``media.audio_seconds`` of random audio, named as the
    model's forward takes them (see the module docstring); ``text_len`` bounds the transcript of CTC labels."""
    model_type = getattr(config, "model_type", "")

    if model_type in STATES_TYPES:  # a word timestamp encoder: its parent's encoder states
        made, described, length = encoder_states(config, media, batch_size=batch_size)
        return AudioInputs(made, described, transcript=max(1, min(text_len, round(length * _CHARS_PER_SECOND))))
    with stand_in(model_type):  # torchaudio's shapes, for the extractors that compute with it (audio_shapes)
        extractor = _extractor(config, media.preprocessor)
        rate = int(extractor.sampling_rate)
        window = getattr(extractor, "chunk_length", None)
        seconds = media.audio_seconds or (float(window) if window else 10.0)
        rng = np.random.default_rng(seed)
        clips = [(0.1 * rng.standard_normal(int(seconds * rate))).astype(np.float32) for _ in range(batch_size)]
        asked = {k: v for k, v in _processor_audio_kwargs(model_type).items() if k == "return_attention_mask"}
        out: dict[str, Any] = dict(extractor(clips, sampling_rate=rate, return_tensors="pt", **asked))
        if "attention_mask" not in out and "return_attention_mask" in inspect.signature(extractor.__call__).parameters:
            # the mask the model's processor asks for (audio_kwargs return_attention_mask=True) and renames to
            # input_features_mask where the forward takes that (AudioFlamingo3Processor, Qwen3ASRProcessor...)
            masked = extractor(clips, sampling_rate=rate, return_tensors="pt", return_attention_mask=True)
            if "attention_mask" in masked:
                out[_ASKED_MASK] = masked["attention_mask"]
    if model_type in PAD_TO_SUBSAMPLING:  # the processor pads the spectrogram to whole encoder frames
        factor = int(config.subsampling_factor)
        padding = -out["input_features"].shape[1] % factor
        out["input_features"] = torch.nn.functional.pad(out["input_features"], (0, 0, 0, padding))
        out["attention_mask"] = torch.nn.functional.pad(out["attention_mask"], (0, padding))
    renamed = RENAMED.get(model_type, {})
    tensors: dict[str, torch.Tensor] = {}
    for key, value in out.items():
        if isinstance(value, torch.Tensor):
            tensors[renamed.get(key, key)] = ~value.bool() if (model_type, key) in INVERTED else value

    standin = "; its torchaudio mel features as zeros of torchaudio's shapes: no torchaudio for this torch" \
        if model_type in TORCHAUDIO_TYPES else ""
    words = f"{seconds:g} s of audio at {rate} Hz per sample ({type(extractor).__name__}{standin})"
    return AudioInputs(tensors, words, transcript=max(1, min(text_len, round(seconds * _CHARS_PER_SECOND))))


@dataclass(frozen=True)
class AudioInputs(MediaInputs):
    """The extractor's tensors, and the length of the transcript a clip of this length holds (CTC and
    transducer labels: about :data:`_CHARS_PER_SECOND` tokens a second, at most ``text_len``)."""

    transcript: int = 1


@dataclass(frozen=True)
class AudioWorkload(Workload):
    """A forward-only workload with known integer inputs (masks, labels)."""


def _accepted(model: nn.Module) -> dict[str, inspect.Parameter]:
    return dict(inspect.signature(model.forward).parameters)


def _task(model: nn.Module, params: dict[str, inspect.Parameter]) -> str:
    """``ctc``, ``classification``, ``transducer`` or ``encoder`` (no labels of its own)."""
    name = type(model).__name__
    if "decoder_input_ids" in params and hasattr(model, "joint"):
        return "transducer"
    if "labels" not in params:
        return "encoder"
    if name.endswith("ForCTC"):
        return "ctc"
    if name.endswith(("ForSequenceClassification", "ForAudioClassification", "ForAudioFrameClassification")):
        return "classification"
    return "encoder"


def _transcript(config: Any, batch: int, tokens: int, rng: np.random.Generator) -> torch.Tensor:
    """Random token ids of a transcript, never the blank / padding id."""
    vocab = int(getattr(config, "vocab_size", 0) or 32)
    blanks = {int(v) for n in ("pad_token_id", "blank_token_id") if isinstance(v := getattr(config, n, None), int)}
    ids = rng.integers(0, vocab, (batch, tokens))
    for b in blanks:
        ids[ids == b] = (b + 1) % vocab
    return torch.from_numpy(ids).long()


@dataclass(frozen=True)
class Feed:
    """What one step gives the model: ``forward`` (the extractor's tensors it takes, and the text it requires),
    ``extra`` (training's labels, a transducer's decoder ids) and how it is trained, in words."""

    forward: dict[str, torch.Tensor]
    extra: dict[str, torch.Tensor]
    trained: str
    contrastive: bool = False  # trained with return_loss=True


def feed(model: nn.Module, media: MediaInputs, *, seed: int = 0) -> Feed:
    """The real tensors a step of ``model`` on ``media`` is given (see the module docstring)."""
    config: Any = model.config
    params = _accepted(model)
    task = _task(model, params)
    reals = {k: v for k, v in media.tensors.items() if k in params}
    if _ASKED_MASK in params and _ASKED_MASK not in reals and "attention_mask" in media.tensors:
        reals[_ASKED_MASK] = media.tensors["attention_mask"]  # the processor's rename of the extractor's mask
    if not any(v.dtype.is_floating_point for v in reals.values()):
        raise ValueError(f"{type(model).__name__}.forward takes none of {sorted(media.tensors)}")
    rng = np.random.default_rng(seed)
    batch = next(iter(reals.values())).shape[0]
    tokens = media.transcript if isinstance(media, AudioInputs) else 1
    extra: dict[str, torch.Tensor] = {}
    if task == "ctc":
        extra["labels"] = _transcript(config, batch, tokens, rng)
        trained = f"the model's CTC loss on a transcript of {tokens} tokens"
    elif task == "classification":
        extra["labels"] = torch.from_numpy(rng.integers(0, max(1, int(config.num_labels)), (batch,))).long()
        trained = "the model's classification loss, one label per clip"
    elif task == "transducer":
        blank = int(getattr(config, "blank_token_id", getattr(config, "pad_token_id", 0)) or 0)
        text = _transcript(config, batch, tokens, rng)
        extra["decoder_input_ids"] = torch.cat([torch.full((batch, 1), blank, dtype=torch.long), text], dim=1)
        trained = (f"the sum of the joint's logits over a transcript of {tokens} tokens (the RNN-T loss itself needs "
                   "torchaudio: not simulated)")
    else:
        trained = "the sum of the first output"
    for name, param in params.items():  # a text input the forward requires (PE-Audio's contrastive text tower)
        if name == "input_ids" and param.default is inspect.Parameter.empty:
            reals["input_ids"] = torch.full((batch, tokens), TEXT_ID, dtype=torch.long)
    if "return_loss" in params:
        trained = "the model's contrastive loss (return_loss)"
    if any(isinstance(getattr(x, "layerdrop", None), float) and x.layerdrop for x in (config, *model.modules())):
        trained += "; LayerDrop: every layer runs (the step of the highest peak)"
    return Feed(reals, extra, trained, "return_loss" in params)


def run_inference(m: nn.Module, x: dict[str, torch.Tensor]) -> Any:
    """One forward (a transducer's decoder on the blank token only: greedy decoding's first step)."""
    x = {k: v for k, v in x.items() if k != "labels"}
    if "decoder_input_ids" in x:
        x["decoder_input_ids"] = x["decoder_input_ids"][:, :1]
    return m(**x)


def training_loss(m: nn.Module, x: dict[str, torch.Tensor], contrastive: bool) -> torch.Tensor:
    """The model's own loss where it has labels (or ``return_loss``), else the sum of its first output."""
    if contrastive:
        return m(**x, return_loss=True).loss
    if "labels" in x:
        return m(**x).loss
    return first_tensor(m(**x)).sum()


def forward_audio_workload(model: nn.Module, media: MediaInputs, *, seed: int = 0) -> Workload:
    """The workload of ``model`` on ``media`` (see the module docstring)."""
    dtype = model_dtype(model)
    fed = feed(model, media, seed=seed)

    def make_inputs() -> dict[str, torch.Tensor]:
        return known_fakes({**fed.forward, **fed.extra}, dtype)

    def train_loss(m: nn.Module, x: dict[str, torch.Tensor]) -> torch.Tensor:
        return training_loss(m, x, fed.contrastive)

    shapes = ", ".join(f"{k} {'x'.join(map(str, v.shape))}" for k, v in fed.forward.items())
    words = f"{media.description}: {shapes}; training: {fed.trained}"
    return AudioWorkload(ModelKind.MODULE, make_inputs, train_loss, run_inference, words, context=_known)


@contextlib.contextmanager
def _known() -> Iterator[None]:
    """The inputs' known values (:class:`~estimator.peak.fakes.known_values.KnownValues`), and CTC's kernels sized by them."""
    with KnownValues(), CtcKernels():
        yield


class CtcKernels(TorchDispatchMode):
    """``torch.nn.functional.ctc_loss`` on fake tensors, which have no kernel for it (its output's size is the
    transcript's): the CPU and CUDA kernels' allocations, sized by the known target lengths.

    forward: ``neg_log_likelihood`` (batch) and ``log_alpha`` (batch, frames, 2 * longest target + 1), kept for
    backward; backward: the gradient (``full_like(log_probs)``) and ``log_beta`` (as ``log_alpha``), freed on return.
    Entered above the tracker, so that what these allocate is counted."""

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        if func in (_aten._ctc_loss.Tensor, _aten._ctc_loss.default):
            log_probs, targets, target_lengths = args[0], args[1], args[3]
            longest = _longest(target_lengths, targets)
            frames, batch = log_probs.shape[0], log_probs.shape[1] if log_probs.dim() == 3 else 1
            return (torch.empty(batch, dtype=log_probs.dtype),
                    torch.empty(batch, frames, 2 * longest + 1, dtype=log_probs.dtype))
        if func in (_aten._ctc_loss_backward.Tensor, _aten._ctc_loss_backward.default):
            log_probs, log_alpha = args[1], args[6]
            grad = torch.full_like(log_probs, float("-inf"))
            log_beta = torch.empty_like(log_alpha)
            del log_beta
            return grad
        return func(*args, **kwargs)


def _longest(target_lengths: Any, targets: torch.Tensor) -> int:
    """The longest target: from the known lengths, else the padded targets' width."""

    if isinstance(target_lengths, (list, tuple)):
        return int(max(target_lengths, default=0))
    real = known_value(target_lengths)
    if real is not None:
        with _disable_current_modes():
            return int(real.max()) if real.numel() else 0
    if targets.dim() == 2:
        return int(targets.shape[1])
    raise ValueError("ctc_loss: the target lengths are not known")
