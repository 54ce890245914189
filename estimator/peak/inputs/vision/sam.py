"""Workloads of the SAM family (Segment Anything 1 / HQ / 2 / 3-tracker, EdgeTAM, their vision towers
and video trackers): what a user of transformers' own processor sends.

``workload(model, batch_size=, seq_len=, image_size=)`` returns a :class:`~estimator.peak.inputs.generic.Workload`
for the models this module knows, else None (:func:`estimator.peak.inputs.providers.workload_for` asks it first).

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
  in the library: there is no training step to simulate (refused with that reason; :mod:`estimator.peak.inputs.vision.sam_video`).

Not fed here, and why (decided, not guessed): SAM3's video model (``Sam3VideoModel``) is prompted by text; its
detector's queries whose scores pass ``score_threshold_detection`` become the objects the tracker follows, so
the work of every frame depends on the values of the activations, not on the inputs (as LightGlue's keypoints):
refused in one line, both modes.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from estimator.peak.fakes.known_values import KnownValues
from estimator.peak.inputs.vision.sam_processing import VIDEO, VIDEO_FRAMES, input_side, maker, processed, shapes
from estimator.peak.workload import ModelKind, Workload, forward_all, model_dtype

if TYPE_CHECKING:
    from estimator.peak.workload import Workload

__all__ = ["PROMPTED", "TOWERS", "VIDEO", "VIDEO_FRAMES", "workload"]

# model type -> the type whose processor feeds it
PROMPTED = {"sam": "sam", "sam_hq": "sam_hq", "sam2": "sam2", "sam3_tracker": "sam3_tracker", "edgetam": "edgetam"}
TOWERS = {"sam_vision_model": "sam", "sam_hq_vision_model": "sam_hq", "sam2_vision_model": "sam2",
          "sam2_hiera_det_model": "sam2", "edgetam_vision_model": "edgetam"}


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
        from estimator.peak.inputs.vision.sam_video import detector_tracker_workload

        return detector_tracker_workload(model)
    if model_type in VIDEO and name.endswith("Model"):
        from estimator.peak.inputs.vision.sam_video import video_workload

        return video_workload(model, VIDEO[model_type], batch_size, image_size)
    return None


def _accepted(model: nn.Module, real: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    import inspect

    params = set(inspect.signature(model.forward).parameters)
    dtype = model_dtype(model)
    return {k: v.to(dtype) if v.is_floating_point() else v for k, v in real.items() if k in params}


def _prompted(model: nn.Module, source: str, batch_size: int, image_size: int | None) -> Workload:

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

    side = input_side(model.config) or 1024  # EdgeTAM's timm tower names no size: its processor's default
    raw = image_size or side
    real = _accepted(model, processed(source, side, raw, batch_size, points=False))
    words = f"vision tower of {source} asked alone: {batch_size} image(s) of {raw}x{raw} px through its processor: {shapes(real)}"
    # the sum of the first output (the backbone's last state) leaves the FPN neck of SAM2's and EdgeTAM's towers
    # without gradients: the first step runs in full (see _prompted)
    return replace(forward_all(ModelKind.VISION_BASE, maker(real), words, KnownValues), full_first_step=True)
