"""The inputs and loss a real run of each kind of model would use.

``generic_workload(model, ...)`` looks at the model (its library, class name and config) and returns a
``Workload``: how to make the batch, how to run a training forward to a scalar loss, and how to
run inference the way ``transformers``' ``generate`` or a pipeline runs it. The same functions
make real tensors (for the ground-truth tests) or fake ones (inside ``FakeTensorMode``), because
they only call tensor factories.

Inputs per kind (``B`` = batch size, ``L`` = sequence length, ``S`` = image size):

- causal LM: ``input_ids`` (B, L); training labels = the input ids (the model shifts them).
- masked LM: ``input_ids`` (B, L); training labels = the input ids at every position.
- encoder-decoder LM: ``input_ids`` (B, L) and training ``labels`` (B, L) (the model builds
  ``decoder_input_ids`` from them); inference: the decoder's start token only, as ``generate``.
- sequence classification: ``input_ids`` (B, L), class ``labels`` (B,).
- image classification (transformers): ``pixel_values`` (B, C, S, S), class ``labels`` (B,).
- timm: images (B, C, S, S) at the pretrained input size unless ``image_size`` is given;
  cross-entropy against class labels (B,) drawn after the forward, since timm models have no
  loss of their own.
- video models: ``pixel_values`` or ``pixel_values_videos`` (B, T, C, S, S), T the config's frames.
- a Qwen-VL-style vision tower alone, a time-series model: see :mod:`estimator.peak.inputs.towers`.
- anything else with ``input_ids`` or ``pixel_values``: training backpropagates the sum of the
  first output.
- a plain ``nn.Module`` (:func:`module_workload`): positional inputs of given sizes (random floats,
  zero integers); training backpropagates ``loss_fn(output)``, by default the sum of the first
  output. This is the workload of :func:`~estimator.modules.estimate.estimate_module`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from estimator.peak.fakes.known_values import KnownValues, know
from estimator.peak.sim.prefill import generate_kwargs, prefill_kwargs
from estimator.peak.workload import ModelKind, Workload, accepts, first_tensor, forward_all, model_dtype

__all__ = ["detect_kind", "generic_workload", "make_input", "module_workload", "ordinary_token"]

logger = logging.getLogger(__name__)


def _is_timm(model: nn.Module) -> bool:
    return type(model).__module__.startswith("timm.") or (
        hasattr(model, "pretrained_cfg") and not hasattr(model, "config")
    )


def detect_kind(model: nn.Module) -> ModelKind:
    """Which kind of workload fits this model; raises ``ValueError`` for unknown ones."""
    if _is_timm(model):
        return ModelKind.TIMM_IMAGE
    name = type(model).__name__
    config = getattr(model, "config", None)
    if config is None:
        raise ValueError(f"cannot tell which inputs {name} takes (no transformers config, not timm)")
    if name.endswith("ForCausalLM") or name.endswith("LMHeadModel") and not config.is_encoder_decoder:
        return ModelKind.CAUSAL_LM
    if name.endswith("ForMaskedLM"):
        return ModelKind.MASKED_LM
    if config.is_encoder_decoder and (name.endswith("ForConditionalGeneration") or _in_seq2seq_mapping(name)):
        return ModelKind.SEQ2SEQ_LM  # transformers' seq2seq LM classes, MarianMTModel and EncoderDecoderModel too
    if name.endswith("ForSequenceClassification"):
        return ModelKind.SEQUENCE_CLASSIFICATION
    if name.endswith("ForImageClassification"):
        return ModelKind.IMAGE_CLASSIFICATION
    if getattr(model, "main_input_name", "input_ids") in ("pixel_values", "pixel_values_videos"):
        # a video model (V-JEPA 2, VideoPrism) names its clip pixel_values_videos
        return ModelKind.VISION_BASE
    return ModelKind.TEXT_BASE


def _in_seq2seq_mapping(name: str) -> bool:
    """The class is one of transformers' seq2seq LM task classes (its auto mapping's values)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES

    return name in {c for v in MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES.values() for c in ([v] if isinstance(v, str) else v)}


def _frames(model: nn.Module) -> int | None:
    """The frames per clip of a video model (VideoMAE, TimeSformer, ViViT: ``num_frames``; V-JEPA 2:
    ``frames_per_clip``), whose pixels are (B, T, C, H, W); ``None`` for an image model."""
    config = getattr(model, "config", None)
    for key in ("num_frames", "frames_per_clip"):
        value = getattr(config, key, None) if config is not None else None
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _num_labels(model: nn.Module) -> int:
    config = getattr(model, "config", None)
    if config is not None:
        return int(getattr(config, "num_labels", 2))
    return int(getattr(model, "num_classes", 1000))


def _image_shape(model: nn.Module, image_size: int | None) -> tuple[int, int, int]:
    config = getattr(model, "config", None)
    if config is not None:
        # the image size may sit in the vision part of a composite config (CLIPForImageClassification's
        # vision_config, a VisionEncoderDecoder's encoder), and may be (height, width) (MGP-STR's [32, 128])
        parts = [config, *(getattr(config, key, None) for key in ("vision_config", "encoder", "backbone_config"))]
        source = next((p for p in parts if p is not None and getattr(p, "image_size", None) is not None), config)
        channels = int(getattr(source, "num_channels", None) or getattr(config, "num_channels", None) or 3)
        # V-JEPA 2 names its frame size crop_size
        size: Any = image_size or getattr(source, "image_size", None) or getattr(config, "crop_size", None) or 224
        if isinstance(size, (list, tuple)):
            return channels, int(size[0]), int(size[-1])
        return channels, int(size), int(size)
    cfg = getattr(model, "pretrained_cfg", None) or {}
    c, h, w = cfg.get("input_size", (3, 224, 224))  # timm's pretrained input size
    if image_size is not None:
        h = w = image_size
    return int(c), int(h), int(w)


def module_workload(
    sizes: tuple[tuple[int, ...], ...], dtype: torch.dtype, loss_fn: Callable[[Any], torch.Tensor] | None = None
) -> Workload:
    """Positional inputs of ``sizes`` in ``dtype``; the training loss is ``loss_fn(output)``, by
    default the sum of the first output. The output is dropped once the loss exists."""

    def make_inputs() -> dict[str, torch.Tensor]:
        return {f"input_{i}": make_input(size, dtype) for i, size in enumerate(sizes)}

    def train_loss(m: nn.Module, x: dict[str, torch.Tensor]) -> torch.Tensor:
        output = m(*x.values())
        return loss_fn(output) if loss_fn is not None else first_tensor(output).sum()

    def infer(m: nn.Module, x: dict[str, torch.Tensor]) -> Any:
        return m(*x.values())

    shapes = ", ".join("x".join(map(str, s)) for s in sizes)
    return Workload(ModelKind.MODULE, make_inputs, train_loss, infer, f"inputs {shapes}")


def make_input(size: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    if dtype.is_floating_point or dtype.is_complex:
        return torch.randn(size, dtype=dtype)
    return torch.zeros(size, dtype=dtype)


def generic_workload(
    model: nn.Module,
    *,
    batch_size: int = 1,
    seq_len: int = 512,
    image_size: int | None = None,
) -> Workload:
    """The workload of the generic paths (see the module docstring); :func:`estimator.peak.inputs.providers.workload_for`
    asks the input providers first."""
    kind = detect_kind(model)
    b, n = batch_size, seq_len
    if kind is not ModelKind.TIMM_IMAGE and accepts(model, "grid_thw") and accepts(model, "hidden_states") and not accepts(
        model, "input_ids"
    ):
        # the towers that name the patches pixel_values (GLM-Image, HunYuan-VL...) are fed by
        # estimator.peak.inputs.vision.models (their processor's patches and grid; GLM-Image's training peak measured
        # within 0.01% of the allocator there, testkit/vision_truth.py)
        from estimator.peak.inputs.towers import patch_tower_inputs

        return forward_all(ModelKind.VISION_BASE, *patch_tower_inputs(model, b, image_size, "hidden_states"))

    if kind in (ModelKind.TIMM_IMAGE, ModelKind.IMAGE_CLASSIFICATION, ModelKind.VISION_BASE):
        shape: tuple[int, ...] = _image_shape(model, image_size)
        classes = _num_labels(model)
        dtype = model_dtype(model)

        frames = None if kind is ModelKind.TIMM_IMAGE else _frames(model)
        key = "pixel_values_videos" if getattr(model, "main_input_name", None) == "pixel_values_videos" else "pixel_values"
        if frames is not None:
            shape = (frames, *shape)  # a video model's clip: (B, T, C, H, W)

        def make_images() -> dict[str, torch.Tensor]:
            pixels = torch.randn(b, *shape, dtype=dtype)
            if kind in (ModelKind.VISION_BASE, ModelKind.TIMM_IMAGE):
                return {key: pixels}
            return {key: pixels, "labels": torch.randint(0, classes, (b,))}

        if kind is ModelKind.TIMM_IMAGE:

            def timm_loss(m: nn.Module, x: dict[str, torch.Tensor]) -> torch.Tensor:
                # The labels are drawn by the loss, after the forward, as the loss_fn of
                # estimate_module does: both paths then simulate the very same allocations.
                logits = m(x["pixel_values"])
                return F.cross_entropy(logits, torch.randint(0, classes, (logits.shape[0],)))

            def timm_infer(m: nn.Module, x: dict[str, torch.Tensor]) -> Any:
                return m(x["pixel_values"])

            return Workload(kind, make_images, timm_loss, timm_infer, f"images {b}x{shape}")

        def hf_img_loss(m: nn.Module, x: dict[str, torch.Tensor]) -> torch.Tensor:
            out = m(**x)
            return out.loss if kind is ModelKind.IMAGE_CLASSIFICATION else first_tensor(out).sum()

        def hf_img_infer(m: nn.Module, x: dict[str, torch.Tensor]) -> Any:
            return m(**{key: x[key]})

        return Workload(kind, make_images, hf_img_loss, hf_img_infer, f"{key} {b}x{shape}")

    if getattr(model, "main_input_name", None) == "past_values" and not accepts(model, "freq"):
        from estimator.peak.inputs.towers import series_inputs

        return forward_all(ModelKind.TEXT_BASE, *series_inputs(model, b))

    config: Any = model.config
    vocab = int(getattr(config.get_text_config(), "vocab_size", 1000) or 1000)
    classes = _num_labels(model)

    token = ordinary_token(config, vocab)

    def make_text() -> dict[str, torch.Tensor]:
        ids = known_ids((b, n), vocab, token)
        if kind is ModelKind.SEQUENCE_CLASSIFICATION:
            return {"input_ids": ids, "labels": torch.randint(0, classes, (b,))}
        if kind is ModelKind.SEQ2SEQ_LM:
            return {"input_ids": ids, "labels": known_ids((b, n), vocab, token)}
        if kind in (ModelKind.CAUSAL_LM, ModelKind.MASKED_LM):
            return {"input_ids": ids, "labels": ids}
        return {"input_ids": ids}

    def text_loss(m: nn.Module, x: dict[str, torch.Tensor]) -> torch.Tensor:
        out = m(**x)
        if kind is ModelKind.TEXT_BASE:
            return first_tensor(out).sum()
        return out.loss

    def text_infer(m: nn.Module, x: dict[str, torch.Tensor]) -> Any:
        ids = x["input_ids"]
        if kind is ModelKind.CAUSAL_LM:
            return m(input_ids=ids, **generate_kwargs(m, *ids.shape), **prefill_kwargs(m))
        if kind is ModelKind.SEQ2SEQ_LM:
            start = getattr(config, "decoder_start_token_id", None)
            start = 0 if start is None else int(start)
            decoder_ids = torch.full((ids.shape[0], 1), start, dtype=torch.long)
            return m(input_ids=ids, decoder_input_ids=decoder_ids, **prefill_kwargs(m))
        return m(input_ids=ids)

    return Workload(kind, make_text, text_loss, text_infer, f"input_ids {b}x{n}", context=KnownValues)


def ordinary_token(config: Any, vocab: int) -> int:
    """The smallest token id that no ``*_token_id`` / ``*_token_index`` of the config names (padding,
    start, end, image...): a prompt of ordinary text, whose masks a model may ask about."""
    special: set[int] = set()
    for part in (config, getattr(config, "get_text_config", lambda: config)()):
        for key, value in vars(part).items() if hasattr(part, "__dict__") else ():
            if key.endswith(("_token_id", "_token_index", "_token_ids")):
                for v in value if isinstance(value, (list, tuple)) else [value]:
                    if isinstance(v, int) and not isinstance(v, bool):
                        special.add(v)
    return next((i for i in range(min(vocab, len(special) + 1)) if i not in special), 0)


def known_ids(shape: tuple[int, int], vocab: int, token: int) -> torch.Tensor:
    """Token ids (a fake inside the fake mode) whose values, ``token`` everywhere, are known to
    :class:`~estimator.peak.fakes.known_values.KnownValues` (outside a fake mode: random ids, as before): a model's questions about its ids (is there
    padding, ``padding_mask.any()``; how long is each sequence) are answered as the real run answers them."""
    from torch.utils._python_dispatch import _disable_current_modes

    ids = torch.randint(0, vocab, shape)
    if not isinstance(ids, torch._subclasses.fake_tensor.FakeTensor):
        return ids  # real inputs (the truth runs), as they always were
    with _disable_current_modes():
        real = torch.full(shape, token, dtype=torch.long, device="cpu")  # the default device may be a fake CUDA one
    return know(ids, real)
