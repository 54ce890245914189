"""Workloads of vision models and vision towers asked alone whose inputs the generic image path does not make.

``workload(model, batch_size=, seq_len=, image_size=)`` returns a :class:`~estimator.peak.inputs.providers.Workload`
for the models this module knows, else None (the generic paths of :mod:`estimator.peak.inputs.providers` then run).

Every input is what the model's own transformers image processor returns for ``batch_size`` random
images (:func:`processed`): the class transformers maps the model type to (a vision tower asked alone:
its parent model's, ``idefics3_vision`` -> ``idefics3``), its settings derived from the config as the
processor families of :mod:`estimator.peak.inputs.prompts.processors` derive them. Inside the fake mode the float
tensors become fakes of the same shapes and the integer ones (masks, grids, positions) fakes whose
values :mod:`estimator.peak.fakes.known_values` knows, so the model's questions about them are answered as
the real run answers them.

- **DETR-like detectors** (DETR, Conditional / Deformable DETR, Table Transformer, RT-DETR v1/v2, DEIMv2,
  PP-DocLayout v3/v4, LW-DETR, RF-DETR): ``pixel_values`` (B, 3, H, W) and, where the model takes it,
  ``pixel_mask`` (B, H, W) at the processor's resolution (DETR: 800 px for a square image; RT-DETR: 640 px),
  or ``image_size`` square where it is given (RT-DETRv2's and D-FINE's checkpoints name RT-DETR's processor). LW-DETR and
  RF-DETR, whose windowed ViT backbone tiles the patches of the image size it is built for, get the backbone
  config's ``image_size``. Training backpropagates the sum of the decoder's last
  hidden state (the base model has no loss).
- **Vision towers asked alone** (Idefics3 / SmolVLM / Granite-Docling, Siglip2, Gemma 4, the grid towers
  of GLM-Image, Cosmos3-Edge, Muse, Kimi-K2.5, LFM3-VL, HunYuan-VL, Inkling2, VideoLLaMA3): the parent
  processor's ``pixel_values`` (tiles flattened to one batch) and its grid / spatial shapes / position ids /
  masks under the names the tower's ``forward`` takes. Training backpropagates the sum of the first output.
- **MGP-STR**: ``pixel_values`` at the config's (height, width); training backpropagates the sum of its
  character, BPE and WordPiece heads' logits (the model has no loss). **PP-LCNet** classification: the
  processor's ``pixel_values``; cross-entropy of its class logits (it returns them, takes no labels).
  **SegGPT**: an image, a prompt image and its binary prompt mask, each half of the config's image size.
  **EfficientLoFTR**: image pairs, ``pixel_values`` (B, 2, C, H, W) (:mod:`estimator.peak.inputs.vision.more_models`, asked
  before this module, with DepthPro, Mask2Former, OneFormer and Grounding DINO).
  **ImageGPT** classification: an image of ``n_positions`` pixels quantized to colour-cluster ``input_ids``.

Not fed here, and why (decided, not guessed): LightGlue's keypoints are where SuperPoint's scores pass a
threshold, a value of the activations, not of the inputs (their count sizes everything after). LeViT training
at batch 1 fails in the real run too (``BatchNorm1d``: "Expected more than 1 value per channel when training"):
the estimator refuses it in one line (:mod:`estimator.peak.sim.batchnorm`); batch 2 simulates. V-JEPA 2, DepthPro,
Mask2Former, OneFormer, Grounding DINO: :mod:`estimator.peak.inputs.vision.more_models`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import replace
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from estimator.peak.fakes.known_values import KnownValues, know
from estimator.peak.inputs.prompts.processors import lookup
from estimator.peak.workload import ModelKind, Workload, forward_all, model_dtype

if TYPE_CHECKING:
    from estimator.peak.workload import Workload

__all__ = ["processed", "workload"]

DETR_TYPES = frozenset({"detr", "conditional_detr", "deformable_detr", "table-transformer", "rt_detr", "rt_detr_v2", "deimv2",
                        "pp_doclayout_v3", "pp_doclayout_v4", "lw_detr", "rf_detr", "d_fine"})
# model types transformers maps no image processor to, and the one their checkpoints name
_PROCESSOR_OF = {"rt_detr_v2": "rt_detr", "d_fine": "rt_detr"}
# detectors on a windowed ViT backbone, which takes the image size it was built for (its windows tile the patches)
_WINDOWED = frozenset({"lw_detr", "rf_detr"})
# processor output name -> the name a tower's forward takes it under
_RENAMES = {"image_grid_thw": ("grid_thw", "image_grid_thw"), "image_position_ids": ("pixel_position_ids",),
            "image_merge_sizes": ("merge_sizes",), "pixel_attention_mask": ("pixel_attention_mask",),
            "spatial_shapes": ("spatial_shapes",), "pixel_values": ("pixel_values",)}


def workload(model: nn.Module, *, batch_size: int, seq_len: int, image_size: int | None) -> Workload | None:
    """The workload of a model this module knows (see the module docstring), else None."""
    config: Any = getattr(model, "config", None)
    model_type = str(getattr(config, "model_type", "") or "")
    if not model_type:
        return None
    if model_type in DETR_TYPES and type(model).__name__.endswith("Model"):
        if image_size is None and model_type in _WINDOWED:
            image_size = image_side(getattr(config.backbone_config, "image_size", None))
        size = {"height": image_size, "width": image_size} if image_size else None
        real = processed(_PROCESSOR_OF.get(model_type, model_type), {"size": size} if size else {}, batch_size, image_size or 800)
        params = _parameters(model)
        detr = _forward_sum(model, {k: v for k, v in real.items() if k in params}, f"{type(model).__name__} (DETR-like)")
        # LW-/RF-DETR's base model leaves its query-selection heads without gradients: AdamW keeps no state for
        # them, which only a full first step shows
        return replace(detr, full_first_step=True) if model_type in _WINDOWED else detr
    found = _other_model(model, model_type, batch_size, image_size)
    if found is not None:
        return found
    parent = _tower_parent(model, model_type)
    if parent is not None:
        tower = _tower_inputs(model, parent, batch_size, image_size)
        plain = tower is not None and list(tower) == ["pixel_values"] and tower["pixel_values"].dim() == 4
        if tower is not None and not (plain and getattr(model, "main_input_name", None) == "pixel_values"):
            # (a tower whose main input is a plain image batch, CLIP's, stays on the generic image path: the
            # image of its config's size)
            return _forward_sum(model, tower, f"vision tower of {parent} asked alone")
    return None


def _other_model(model: nn.Module, model_type: str, batch_size: int, image_size: int | None) -> Workload | None:
    """MGP-STR, PP-LCNet and the keypoint matchers (see the module docstring), else None."""

    config: Any = model.config
    name = type(model).__name__
    if model_type == "mgp-str":
        height, width = (list(config.image_size) * 2)[:2] if isinstance(config.image_size, (list, tuple)) else [config.image_size] * 2
        real = as_model_dtype(model, processed(model_type, {"size": {"height": int(height), "width": int(width)}}, batch_size,
                                                image_size or int(width)))
        shapes = shapes_text(real)

        def heads_loss(m: nn.Module, x: dict[str, torch.Tensor]) -> torch.Tensor:
            logits = m(**x).logits  # the character, BPE and WordPiece heads: a real training trains all three
            return sum((t.float().sum() for t in logits), torch.zeros(()))

        return Workload(ModelKind.VISION_BASE, known_inputs_maker(real), heads_loss, lambda m, x: m(**x), f"{name}: {shapes}", KnownValues)
    if model_type == "pp_lcnet" and name.endswith("ForImageClassification"):
        real = as_model_dtype(model, processed(model_type, {}, batch_size, image_size or 224))
        classes = int(config.num_labels)

        def class_loss(m: nn.Module, x: dict[str, torch.Tensor]) -> torch.Tensor:
            # the model returns its class logits (no loss, no labels argument): cross-entropy against labels drawn after
            logits = m(**x).last_hidden_state
            return torch.nn.functional.cross_entropy(logits, torch.randint(0, classes, (logits.shape[0],)))

        return Workload(ModelKind.IMAGE_CLASSIFICATION, known_inputs_maker(real), class_loss, lambda m, x: m(**x),
                        f"{name}: {shapes_text(real)}, cross-entropy against {classes} classes", KnownValues)
    if model_type == "imagegpt" and name.endswith("ForImageClassification"):
        # the processor quantizes each pixel of an image of n_positions pixels to the nearest of the vocab - 1 colour
        # clusters: input_ids (B, n_positions). The checkpoint's palette is not in the config; an even 3-d grid of
        # colours in [-1, 1] stands for it (the ids' values change no shape)
        side = int(int(config.n_positions) ** 0.5)
        levels = round((int(config.vocab_size) - 1) ** (1 / 3))
        axis = np.linspace(-1.0, 1.0, levels)
        clusters = np.stack(np.meshgrid(axis, axis, axis, indexing="ij"), -1).reshape(-1, 3)
        real = processed(model_type, {"clusters": clusters, "size": {"height": side, "width": side}}, batch_size, image_size or side)
        real["labels"] = torch.zeros(batch_size, dtype=torch.long)
        real.pop("pixel_values", None)

        def image_loss(m: nn.Module, x: dict[str, torch.Tensor]) -> torch.Tensor:
            return m(**x).loss

        return Workload(ModelKind.IMAGE_CLASSIFICATION, known_inputs_maker(real), image_loss,
                        lambda m, x: m(input_ids=x["input_ids"]),
                        f"{name}: an image of {side}x{side} pixels quantized by ImageGPTImageProcessor (input_ids in place of "
                        f"pixel_values): {shapes_text(real)}",
                        KnownValues)
    if model_type == "seggpt":
        # one image and one prompt image with its mask, each half of the config's image_size (SegGPT stacks them)
        height, width = (list(config.image_size) * 2)[:2] if isinstance(config.image_size, (list, tuple)) else [config.image_size] * 2
        half = {"height": int(height) // 2, "width": int(width)}
        real = as_model_dtype(model, processed(model_type, {"size": half}, batch_size, image_size or int(width), prompts=True))
        return forward_all(ModelKind.VISION_BASE, known_inputs_maker(real), f"{name}: image + prompt image and mask, {shapes_text(real)}",
                            KnownValues)
    return None


def shapes_text(real: dict[str, torch.Tensor]) -> str:
    return ", ".join(f"{k} {'x'.join(map(str, v.shape))}" for k, v in real.items())


def as_model_dtype(model: nn.Module, real: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    dtype = model_dtype(model)
    return {k: v.to(dtype) if v.is_floating_point() else v for k, v in real.items()}


def processed(model_type: str, settings: dict[str, Any], batch_size: int, size: int, *, pairs: bool = False,
              prompts: bool = False) -> dict[str, torch.Tensor]:
    """What ``model_type``'s transformers image processor (built with ``settings``) returns for
    ``batch_size`` random RGB images of ``size`` x ``size`` pixels (``pairs``: pairs of them, as keypoint
    matchers take them; ``prompts``: each with a prompt image and a binary prompt mask, as SegGPT takes them):
    real CPU tensors."""
    from torch.utils._python_dispatch import _disable_current_modes
    from transformers.models.auto.image_processing_auto import IMAGE_PROCESSOR_MAPPING_NAMES, get_image_processor_class_from_name

    names = IMAGE_PROCESSOR_MAPPING_NAMES.get(model_type) or {}
    name = names.get("torchvision") or names.get("pil")
    if name is None:
        raise ValueError(f"transformers has no image processor for {model_type}")
    with _disable_current_modes():  # the processor's tensors are real ones, even when asked inside the fake mode
        processor = get_image_processor_class_from_name(name)(**settings)
        rng = np.random.default_rng(0)
        images: list[Any] = [rng.integers(0, 256, (size, size, 3), dtype=np.uint8) for _ in range(batch_size * (1 + pairs))]
        if pairs:
            images = [images[2 * i: 2 * i + 2] for i in range(batch_size)]
        extra: dict[str, Any] = {}
        if prompts:
            extra = {"prompt_images": [rng.integers(0, 256, (size, size, 3), dtype=np.uint8) for _ in range(batch_size)],
                     "prompt_masks": [rng.integers(0, 2, (size, size), dtype=np.uint8) for _ in range(batch_size)], "num_labels": 1}
        out = processor(images=images, return_tensors="pt", **extra)
        return {k: v.to("cpu") for k, v in out.items() if isinstance(v, torch.Tensor)}


def _tower_parent(model: nn.Module, model_type: str) -> str | None:
    """The model type whose processor feeds a vision tower asked alone (its config's type less
    ``_vision`` / ``_vision_model``), where that parent has an image processor."""
    from transformers.models.auto.image_processing_auto import IMAGE_PROCESSOR_MAPPING_NAMES

    for suffix in ("_vision_model", "_vision"):
        if model_type.endswith(suffix) and model_type[: -len(suffix)] in IMAGE_PROCESSOR_MAPPING_NAMES:
            return model_type[: -len(suffix)]
    return None


def _tower_inputs(model: nn.Module, parent: str, batch_size: int, image_size: int | None) -> dict[str, torch.Tensor] | None:
    """The parent processor's output for ``batch_size`` images, under the names the tower's forward takes."""

    config: Any = model.config
    family = lookup(parent)
    settings = family.image_processor(SimpleNamespace(vision_config=config)) if family is not None else _patching(parent, config)
    size = int(image_size or (family.default_size(SimpleNamespace(vision_config=config)) if family is not None else 0)
               or image_side(getattr(config, "image_size", None)) or 224)
    real = processed(parent, settings, batch_size, size)
    params = _parameters(model)
    out: dict[str, torch.Tensor] = {}
    for key, value in real.items():
        target = next((n for n in _RENAMES.get(key, (key,)) if n in params), None)
        if target is not None:
            out[target] = value
    if "pixel_values" not in out:
        return None
    pixels = out["pixel_values"]
    if pixels.dim() == 5:  # tiles per image (Idefics3): the tower takes them as one batch
        out["pixel_values"] = pixels.flatten(0, 1)
        mask = out.pop("pixel_attention_mask", None)
        del mask  # the tower makes its all-ones patch mask itself
    return out


def _patching(parent: str, config: Any) -> dict[str, Any]:
    """The parent image processor's patching from the tower's config, for the settings that processor has:
    ``patch_size``, ``merge_size`` (the config's spatial merge) and ``temporal_patch_size`` (Muse-Spark:
    ``patch_temporal``; 1 where the config has none: the tower's patch embedding then takes one frame)."""
    from transformers.models.auto.image_processing_auto import IMAGE_PROCESSOR_MAPPING_NAMES, get_image_processor_class_from_name

    if parent == "inkling2":  # its "size" is the pixels of one image token: spatial_merge_size patches a side
        side = int(config.spatial_merge_size) * int(config.patch_size)
        return {"size": {"height": side, "width": side}}
    names = IMAGE_PROCESSOR_MAPPING_NAMES[parent]
    defaults = vars(get_image_processor_class_from_name(names.get("torchvision") or names["pil"])())
    wanted = {"patch_size": getattr(config, "patch_size", None),
              "merge_size": getattr(config, "spatial_merge_size", None) or getattr(config, "merge_size", None),
              "temporal_patch_size": getattr(config, "temporal_patch_size", None) or getattr(config, "patch_temporal", None) or 1}
    return {k: int(v) for k, v in wanted.items() if v is not None and defaults.get(k) is not None}


def image_side(size: Any) -> int | None:
    if isinstance(size, (list, tuple)):
        return int(size[0])
    return int(size) if size else None


def _parameters(model: nn.Module) -> set[str]:
    try:
        return set(inspect.signature(model.forward).parameters)
    except (TypeError, ValueError):
        return set()


def _forward_sum(model: nn.Module, real: dict[str, torch.Tensor], what: str) -> Workload:
    """Feed ``real`` (fakes of it inside the fake mode) by name; training backpropagates the sum of the first output."""

    shapes = ", ".join(f"{k} {'x'.join(map(str, v.shape))}" for k, v in real.items())
    dtype = model_dtype(model)
    real = {k: v.to(dtype) if v.is_floating_point() else v for k, v in real.items()}
    return forward_all(ModelKind.VISION_BASE, known_inputs_maker(real), f"{what}: {shapes}", KnownValues)


def known_inputs_maker(real: dict[str, torch.Tensor]) -> Callable[[], dict[str, torch.Tensor]]:
    """Fakes of the processor's tensors inside a fake mode (integers known), the tensors themselves outside one."""

    def make_inputs() -> dict[str, torch.Tensor]:
        out: dict[str, torch.Tensor] = {}
        for key, value in real.items():
            made = torch.empty(value.shape, dtype=value.dtype)
            if not isinstance(made, torch._subclasses.fake_tensor.FakeTensor):
                out[key] = value  # a real run (the truth): the processor's own tensors, held once
            elif value.dtype.is_floating_point:
                out[key] = made
            else:
                out[key] = know(made, value)
        return out

    return make_inputs
