"""Workloads of the SAM family (Segment Anything 1 / HQ / 2 / 3-tracker, EdgeTAM, their vision towers
and video trackers): what a user of transformers' own processor sends.

``workload(model, batch_size=, seq_len=, image_size=)`` returns a :class:`~estimator.peak.basic_inputs.Workload`
for the models this module knows, else None (:func:`estimator.peak.inputs.workload_for` asks it first).

- **Promptable segmenters** (``SamModel``, ``SamHQModel``, ``Sam2Model``, ``Sam3TrackerModel``, ``EdgeTamModel``):
  the model's processor (``SamProcessor``, ``Sam2Processor``, ...) called as transformers' docs call it,
  ``processor(images=image, input_points=[[[x, y]]])``: ``pixel_values`` (B, 3, S, S) at the model's input
  size S (the vision tower's ``image_size``: the processor's resize and pad are set to it, as a checkpoint's
  ``preprocessor_config.json`` matches its model) and one point prompt per image, ``input_points``
  (B, 1, 1, 2) in the resized image's coordinates, with ``input_labels`` (B, 1, 1) where the model takes
  them. ``image_size`` is the side of the raw square image the user sends (default S): the processor
  resizes it to S, so it changes no tensor the model sees. Inference: one ``no_grad`` forward (three
  masks per prompt, the model's default). Training backpropagates the sum of ``pred_masks`` and
  ``iou_scores`` (the models return no loss; a fine-tuning loss reads both heads).
- **Vision towers asked alone** (``SamVisionModel``, ``SamHQVisionModel``, ``Sam2VisionModel``,
  ``Sam2HieraDetModel``, ``EdgeTamVisionModel``): the parent model's image processor's ``pixel_values``
  at the tower's ``image_size`` (EdgeTAM's timm tower has none: its processor's default, 1024 px);
  training backpropagates the sum of the first output.
- **Video trackers** (``Sam2VideoModel``, ``Sam3TrackerVideoModel``, ``EdgeTamVideoModel``): transformers'
  documented call, ``processor.init_video_session(video=frames)``, a point prompt on frame 0 for one
  object (``add_inputs_to_inference_session``), then ``model.propagate_in_video_iterator(session)`` over
  every frame: ``pixel_values`` of :data:`VIDEO_FRAMES` frames at S (the memory bank's ``num_maskmem``
  past frames and the current one fill by the last frame). The forward runs under ``torch.inference_mode``
  in the library: there is no training step to simulate (refused with that reason; :mod:`estimator.peak.sam_video`).

Not fed here, and why (decided, not guessed): SAM3's video model (``Sam3VideoModel``) is prompted by text; its
detector's queries whose scores pass ``score_threshold_detection`` become the objects the tracker follows, so
the work of every frame depends on the values of the activations, not on the inputs (as LightGlue's keypoints):
refused in one line, both modes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

if TYPE_CHECKING:
    from estimator.peak.basic_inputs import Workload

__all__ = ["PROMPTED", "TOWERS", "VIDEO", "VIDEO_FRAMES", "workload"]

# model type -> the type whose processor feeds it
PROMPTED = {"sam": "sam", "sam_hq": "sam_hq", "sam2": "sam2", "sam3_tracker": "sam3_tracker", "edgetam": "edgetam"}
TOWERS = {"sam_vision_model": "sam", "sam_hq_vision_model": "sam_hq", "sam2_vision_model": "sam2",
          "sam2_hiera_det_model": "sam2", "edgetam_vision_model": "edgetam"}
VIDEO = {"sam2_video": "sam2_video", "sam3_tracker_video": "sam3_tracker_video", "edgetam_video": "sam2_video"}
VIDEO_FRAMES = 8


def workload(model: nn.Module, *, batch_size: int, seq_len: int, image_size: int | None) -> Workload | None:
    """The workload of a SAM-family model (see the module docstring), else None."""
    config: Any = getattr(model, "config", None)
    model_type = str(getattr(config, "model_type", "") or "")
    name = type(model).__name__
    if model_type in PROMPTED and name.endswith("Model") and "Vision" not in name:
        return _prompted(model, PROMPTED[model_type], batch_size, image_size)
    if model_type in TOWERS:
        return _tower(model, TOWERS[model_type], batch_size, image_size)
    if model_type == "sam3_video" and name.endswith("Model"):
        from estimator.peak.sam_video import detector_tracker_workload

        return detector_tracker_workload(model)
    if model_type in VIDEO and name.endswith("Model"):
        from estimator.peak.sam_video import video_workload

        return video_workload(model, VIDEO[model_type], batch_size, image_size)
    return None


def input_side(config: Any) -> int | None:
    """The side of the square image the model's vision tower takes: its ``image_size`` (SAM's ViT), its
    backbone's (SAM2's Hiera, SAM3's ViT), else the prompt encoder's; None where the config names none."""
    parts = [config, getattr(config, "vision_config", None), getattr(config, "tracker_config", None)]
    for part in parts:
        if part is None:
            continue
        for source in (part, getattr(part, "vision_config", None), getattr(part, "backbone_config", None),
                       getattr(getattr(part, "vision_config", None), "backbone_config", None),
                       getattr(part, "prompt_encoder_config", None)):
            size = getattr(source, "image_size", None) if source is not None else None
            if isinstance(size, (list, tuple)) and size:
                return int(size[0])
            if isinstance(size, int) and not isinstance(size, bool):
                return size
    return None


def processor_for(model_type: str, side: int) -> Any:
    """``model_type``'s transformers processor with its image (and video) processor set to ``side`` px: SAM's
    resizes the longest edge and pads to the square, SAM2's and SAM3's resize to the square."""
    import transformers
    from transformers.models.auto.image_processing_auto import IMAGE_PROCESSOR_MAPPING_NAMES, get_image_processor_class_from_name
    from transformers.models.auto.processing_auto import PROCESSOR_MAPPING_NAMES
    from transformers.models.auto.video_processing_auto import VIDEO_PROCESSOR_MAPPING_NAMES, video_processor_class_from_name

    names = IMAGE_PROCESSOR_MAPPING_NAMES[model_type]
    image_cls = get_image_processor_class_from_name(names.get("torchvision") or names["pil"])
    defaults = image_cls()
    if getattr(defaults, "pad_size", None) is not None:  # SAM: longest edge, then padded to a square
        image = image_cls(size={"longest_edge": side}, pad_size={"height": side, "width": side})
    else:
        image = image_cls(size={"height": side, "width": side})
    cls = getattr(transformers, PROCESSOR_MAPPING_NAMES[model_type])
    if model_type in VIDEO.values():  # SAM2's video processor: the one transformers has for the family's trackers
        video_names = VIDEO_PROCESSOR_MAPPING_NAMES["sam2_video"]
        video = video_processor_class_from_name(video_names.get("torchvision") or next(iter(video_names.values())))
        return cls(image_processor=image, video_processor=video(size={"height": side, "width": side}))
    return cls(image_processor=image)


def _images(batch_size: int, side: int) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.integers(0, 256, (side, side, 3), dtype=np.uint8) for _ in range(batch_size)]


def processed(model_type: str, side: int, raw: int, batch_size: int, *, points: bool) -> dict[str, torch.Tensor]:
    """What ``model_type``'s processor (at ``side`` px) returns for ``batch_size`` random RGB images of
    ``raw`` x ``raw`` pixels and, with ``points``, one point prompt each (the image's centre): real CPU tensors."""
    from torch.utils._python_dispatch import _disable_current_modes

    with _disable_current_modes():  # the processor's tensors are real ones, even when asked inside the fake mode
        processor = processor_for(model_type, side)
        extra: dict[str, Any] = {}
        if points:
            extra = {"input_points": [[[[raw / 2, raw / 2]]] for _ in range(batch_size)],
                     "input_labels": [[[1]] for _ in range(batch_size)]}
        out = processor(images=_images(batch_size, raw), return_tensors="pt", **extra)
        return {k: v.to("cpu") for k, v in out.items() if isinstance(v, torch.Tensor)}


def _dtype(model: nn.Module) -> torch.dtype:
    return next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)


def _accepted(model: nn.Module, real: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    import inspect

    params = set(inspect.signature(model.forward).parameters)
    dtype = _dtype(model)
    return {k: v.to(dtype) if v.is_floating_point() else v for k, v in real.items() if k in params}


def maker(real: dict[str, torch.Tensor]) -> Callable[[], dict[str, torch.Tensor]]:
    """Fakes of the processor's tensors inside a fake mode (integer ones with their values known), the tensors themselves outside one."""

    def make_inputs() -> dict[str, torch.Tensor]:
        from estimator.peak.known_values import know

        out: dict[str, torch.Tensor] = {}
        for key, value in real.items():
            made = torch.empty(value.shape, dtype=value.dtype)
            if not isinstance(made, torch._subclasses.fake_tensor.FakeTensor):
                out[key] = value  # a real run (the truth): the processor's own tensors
            elif value.dtype.is_floating_point:
                out[key] = made
            else:
                out[key] = know(made, value)
        return out

    return make_inputs


def shapes(real: dict[str, torch.Tensor]) -> str:
    return ", ".join(f"{k} {'x'.join(map(str, v.shape))}" for k, v in real.items())


def _prompted(model: nn.Module, source: str, batch_size: int, image_size: int | None) -> Workload:
    from estimator.peak.basic_inputs import ModelKind, Workload
    from estimator.peak.known_values import KnownValues

    side = input_side(model.config) or 1024
    raw = image_size or side
    real = _accepted(model, processed(source, side, raw, batch_size, points=True))

    def train_loss(m: nn.Module, x: dict[str, torch.Tensor]) -> torch.Tensor:
        out = m(**x)
        return out.pred_masks.sum() + out.iou_scores.sum()

    def infer(m: nn.Module, x: dict[str, torch.Tensor]) -> Any:
        return m(**x)

    words = (f"{type(model).__name__}: {batch_size} image(s) of {raw}x{raw} px through its processor (pixel_values at "
             f"{side} px) with one point prompt each: {shapes(real)}; training loss: sum of pred_masks and iou_scores")
    # the loss leaves some parameters without a gradient (the mask-prompt encoder without a mask prompt, the FPN level
    # the mask decoder does not read, the object-score head): AdamW keeps no state for them, so the first step runs in full
    return Workload(ModelKind.VISION_BASE, maker(real), train_loss, infer, words, KnownValues, full_first_step=True)


def _tower(model: nn.Module, source: str, batch_size: int, image_size: int | None) -> Workload:
    from estimator.peak.basic_inputs import ModelKind, _forward_all
    from estimator.peak.known_values import KnownValues

    side = input_side(model.config) or 1024  # EdgeTAM's timm tower names no size: its processor's default
    raw = image_size or side
    real = _accepted(model, processed(source, side, raw, batch_size, points=False))
    words = f"vision tower of {source} asked alone: {batch_size} image(s) of {raw}x{raw} px through its processor: {shapes(real)}"
    # the sum of the first output (the backbone's last state) leaves the FPN neck of SAM2's and EdgeTAM's towers
    # without gradients: the first step runs in full (see _prompted)
    return replace(_forward_all(ModelKind.VISION_BASE, maker(real), words, KnownValues), full_first_step=True)
