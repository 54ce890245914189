"""Workloads of the rest: audio codecs, text-to-speech, time series and other models with inputs of their own.

``workload(model, batch_size=, seq_len=, image_size=)`` returns a :class:`~estimator.peak.inputs.providers.Workload`
for the models this module knows, else None (the generic paths of :mod:`estimator.peak.inputs.providers` then run).

- audio codecs (DAC, EnCodec, Mimi, X-Codec, Pocket TTS's and VibeVoice's audio tokenizers; their
  encoders alone): ``input_values`` (and ``padding_mask``) as the model type's own feature extractor
  (transformers' class for the type, or for the codec an ``_encoder`` type belongs to) makes them from
  :data:`AUDIO_SECONDS` s of random audio, its sampling rate, channels and hop length read off the
  config; a codec's decoder alone: the continuous ``latents`` (B, hidden_size, frames) its encoder
  makes for that audio, frames at the config's frame rate;
- UnivNet (a vocoder): the ``input_features`` (log-mel) and ``noise_sequence`` its feature extractor
  makes from that audio;
- the other models: see :mod:`estimator.peak.inputs.other.models`.

Training backpropagates the sum of the first output that carries a gradient (a codec's own loss where it returns
one, else its ``audio_values``);
inference is one forward under ``no_grad``. Integer inputs (padding masks) are known values
(:mod:`estimator.peak.fakes.known_values`): a model that asks about them is answered as the real run is.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn
from torch.utils._python_dispatch import _disable_current_modes

from estimator.build.scalars import scalar_buffers
from estimator.peak.fakes.known_values import KnownValues, know
from estimator.peak.inputs.audio.shapes import TORCHAUDIO_TYPES, stand_in, torchaudio_class
from estimator.peak.inputs.audio.stream_speech import stream_inputs
from estimator.peak.inputs.audio.tts import tts_inputs
from estimator.peak.inputs.other.models import model_inputs
from estimator.peak.workload import ModelKind, Workload, first_tensor, model_dtype

if TYPE_CHECKING:
    from estimator.peak.inputs.other.models import Found
    from estimator.peak.workload import Workload

__all__ = ["AUDIO_SECONDS", "codec_arrays", "workload"]

AUDIO_SECONDS = 10.0  # a clip of the length audio.py feeds a speech model without a window of its own

# what the feature extractor's __init__ takes -> the config keys that hold it
_EXTRACTOR_SETTINGS = {
    "sampling_rate": ("sampling_rate", "sample_rate", "input_sampling_rate"),
    "feature_size": ("audio_channels", "channels"),
    "hop_length": ("hop_length",),
    "num_mel_bins": ("num_mel_bins",),
    "model_in_channels": ("model_in_channels",),
}


def workload(model: nn.Module, *, batch_size: int, seq_len: int, image_size: int | None) -> Workload | None:
    """The workload of a model this module knows (see the module docstring), else None."""
    config = getattr(model, "config", None)
    if config is None:
        return None
    arrays = codec_arrays(model, batch_size, AUDIO_SECONDS)
    if arrays is not None:
        tensors, description = arrays
        return arrays_workload(model, tensors, description)

    found = model_inputs(model, batch_size, seq_len) or tts_inputs(model, batch_size, seq_len) or stream_inputs(model, batch_size, seq_len)
    if found is None:
        return None
    return arrays_workload(model, found.arrays, found.description, found)


def codec_arrays(model: nn.Module, batch_size: int, seconds: float) -> tuple[dict[str, np.ndarray], str] | None:
    """The inputs of an audio codec, its encoder or decoder alone, or a vocoder fed by a feature
    extractor (numpy arrays by forward argument name, and their description); None for other models."""
    config: Any = model.config
    model_type = str(getattr(config, "model_type", ""))
    family = _extractor_family(model_type)
    if family is None:
        return None
    main = getattr(model, "main_input_name", "")
    params = _parameters(model)
    decoder = main == "latents" or model_type.endswith("_decoder")
    if not decoder and main not in ("input_values", "input_features"):
        return None

    with stand_in(family):  # X-Codec 2 and NeuCodec compute their mel features with torchaudio (audio_shapes)
        extractor = _extractor(family, config)
        rate = int(extractor.sampling_rate)
        rng = np.random.default_rng(0)
        clips = [(0.1 * rng.standard_normal(int(seconds * rate))).astype(np.float32) for _ in range(batch_size)]
        with _disable_current_modes():  # real arrays, whatever mode the caller is in (VibeVoice's extractor makes torch tensors only)
            made = {k: v.numpy() if isinstance(v, torch.Tensor) else v
                    for k, v in extractor(clips, sampling_rate=rate, return_tensors="pt").items()}

    standin = ", its torchaudio mel features as zeros of torchaudio's shapes" if family in TORCHAUDIO_TYPES else ""
    what = f"{seconds:g} s of audio at {rate} Hz per sample ({type(extractor).__name__}{standin}"
    if decoder:
        name = "latents" if "latents" in params else params[0]
        frames = _frames(config, made["input_values"].shape[-1], rate)
        width = int(config.hidden_size)
        arrays = {name: np.zeros((batch_size, width, frames), dtype=np.float32)}
        return arrays, f"{name} {batch_size}x{width}x{frames}: the latents of {what}), at {rate / _hop(config, rate):g} frames/s"
    arrays = {}
    for key, value in made.items():
        if not isinstance(value, np.ndarray):
            continue
        if key in params:
            arrays[key] = value
        elif key == "input_values" and params and params[0] not in made:
            arrays[params[0]] = value  # VibeVoice's encoder names its audio hidden_states
    shapes = ", ".join(f"{k} {'x'.join(map(str, v.shape))}" for k, v in arrays.items())
    words = "input_values" if "input_values" not in arrays else ""
    return arrays, f"{what}; {shapes}{' (input_values)' if words else ''})"


def _extractor_family(model_type: str) -> str | None:
    """The model type whose feature extractor feeds ``model_type``: its own, else that of the codec
    an ``_encoder`` / ``_decoder`` type is half of (``mimi_decoder`` -> ``mimi``)."""
    from transformers.models.auto.feature_extraction_auto import FEATURE_EXTRACTOR_MAPPING_NAMES

    for candidate in (model_type, model_type.removesuffix("_encoder").removesuffix("_decoder")):
        if candidate in FEATURE_EXTRACTOR_MAPPING_NAMES and candidate in _AUDIO_FAMILIES:
            return candidate
    return None


# the codec and vocoder types fed audio by their feature extractor (transformers' classes, no torchaudio)
_AUDIO_FAMILIES = frozenset({"dac", "encodec", "mimi", "pocket_tts_audio_tokenizer", "xcodec", "xcodec2", "neucodec", "vibevoice_acoustic_tokenizer",
                             "univnet"})


def _extractor(family: str, config: Any) -> Any:
    """The family's feature extractor, its settings read off the config where the config has them."""
    import inspect

    from transformers.models.auto.feature_extraction_auto import FEATURE_EXTRACTOR_MAPPING_NAMES, feature_extractor_class_from_name

    cls: Any = (torchaudio_class(family) if family in TORCHAUDIO_TYPES
                else feature_extractor_class_from_name(FEATURE_EXTRACTOR_MAPPING_NAMES[family]))
    accepted = inspect.signature(cls.__init__).parameters
    settings: dict[str, Any] = {}
    for arg, keys in _EXTRACTOR_SETTINGS.items():
        value = next((getattr(config, k) for k in keys if isinstance(getattr(config, k, None), int)), None)
        if arg in accepted and value is not None:
            settings[arg] = value
    return cls(**settings)


def _hop(config: Any, rate: int) -> float:
    """Audio samples per latent frame: the config's frame rate, else the product of its up-sampling ratios."""
    frame_rate = getattr(config, "frame_rate", None)
    if isinstance(frame_rate, (int, float)) and frame_rate > 0:
        return rate / float(frame_rate)
    ratios = getattr(config, "upsampling_ratios", None) or getattr(config, "downsampling_ratios", None) or [1]
    return float(math.prod(int(r) for r in ratios))


def _frames(config: Any, samples: int, rate: int) -> int:
    return max(1, math.ceil(samples / _hop(config, rate)))


def _parameters(model: nn.Module) -> list[str]:
    import inspect

    try:
        return [p for p in inspect.signature(model.forward).parameters if p not in ("self", "kwargs", "args")]
    except (TypeError, ValueError):
        return []


def arrays_workload(model: nn.Module, arrays: dict[str, np.ndarray], description: str, found: Found | None = None) -> Workload:
    """Feed every array by name (floats in the model's dtype; integers known values); training
    backpropagates the first output that carries a gradient, inference is one forward (or what
    ``found`` says a real run does)."""

    dtype = model_dtype(model)
    scalars = scalar_buffers(model)  # before the model is made fake (estimator.build.scalars)
    prepare = found.prepare if found is not None and found.prepare is not None else (lambda m: None)
    drops = found.infer_drops if found is not None else ()

    def make_inputs() -> dict[str, torch.Tensor]:
        known = found.known_floats if found is not None else ()
        return {k: _tensor(v, dtype, k in known) for k, v in arrays.items()}

    def train_loss(m: nn.Module, x: dict[str, torch.Tensor]) -> torch.Tensor:
        prepare(m)
        if found is not None and found.train is not None:
            return _first_with_grad(found.train(m, x)).sum()
        return _first_with_grad(m(**x)).sum()

    def infer(m: nn.Module, x: dict[str, torch.Tensor]) -> Any:
        prepare(m)
        if found is not None and found.infer is not None:
            return found.infer(m, x)
        return m(**{k: v for k, v in x.items() if k not in drops})

    @contextlib.contextmanager
    def context() -> Iterator[None]:
        for name, real in scalars.items():
            buffer = model.get_buffer(name)
            if isinstance(buffer, torch._subclasses.fake_tensor.FakeTensor):
                know(buffer, real)
        with KnownValues(), _same_dtype_to_is_a_no_op():
            yield

    kind = ModelKind.SEQ2SEQ_LM if found is not None and found.seq2seq else ModelKind.TEXT_BASE
    return Workload(kind, make_inputs, train_loss, infer, description, context=context)


@contextlib.contextmanager
def _same_dtype_to_is_a_no_op() -> Iterator[None]:
    """``module.to(dtype)`` where every tensor of the module already has that dtype changes nothing on a
    real model (Switch Transformers' router calls it in every forward); on a fake one ``Module._apply``
    would swap each parameter for itself, which fails once the optimizer holds it. Here it returns the module."""
    original = nn.Module.to

    def to(self: nn.Module, *args: Any, **kwargs: Any) -> nn.Module:
        target = next((a for a in (*args, kwargs.get("dtype")) if isinstance(a, torch.dtype)), None)
        only_dtype = target is not None and len(args) + len(kwargs) == 1
        tensors = [*self.parameters(), *self.buffers()]
        if only_dtype and all(t.dtype == target or not t.is_floating_point() for t in tensors):
            return self
        return original(self, *args, **kwargs)

    nn.Module.to = to  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        nn.Module.to = original  # type: ignore[method-assign]


def _first_with_grad(out: Any) -> torch.Tensor:
    """The first output that carries a gradient (a codec's ``audio_values``, not its integer ``audio_codes``)."""

    items = out.to_tuple() if hasattr(out, "to_tuple") else out if isinstance(out, (tuple, list)) else (out,)
    found = next((t for t in items if isinstance(t, torch.Tensor) and t.requires_grad), None)
    return found if found is not None else first_tensor(out)


def _tensor(value: np.ndarray, dtype: torch.dtype, known_float: bool = False) -> torch.Tensor:
    """``value`` as a tensor: floats in ``dtype`` (a fake of that shape inside a fake mode), integers and
    booleans with their values (known to :mod:`estimator.peak.fakes.known_values` inside a fake mode)."""

    floating = np.issubdtype(value.dtype, np.floating)
    probe = torch.empty(value.shape, dtype=dtype if floating else _INT_DTYPES.get(value.dtype.name, torch.long))
    if not isinstance(probe, torch._subclasses.fake_tensor.FakeTensor):
        return torch.from_numpy(np.ascontiguousarray(value)).to(probe.dtype)
    if floating and not known_float:
        return probe
    with _disable_current_modes():
        real = torch.from_numpy(np.ascontiguousarray(value)).to(probe.dtype).cpu()
    return know(probe, real)


_INT_DTYPES = {"int32": torch.int32, "int64": torch.long, "bool": torch.bool, "int8": torch.int8, "uint8": torch.uint8}
