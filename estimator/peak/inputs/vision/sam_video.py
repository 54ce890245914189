"""The workload of the SAM family's video trackers (``Sam2VideoModel``, ``Sam3TrackerVideoModel``,
``EdgeTamVideoModel``): transformers' documented call, not one forward.

As the model docs run them: the processor's ``init_video_session(video=frames)`` (its video processor's
``pixel_values_videos`` of the clip, stored in an inference session), a point prompt for each object on
frame 0 (``processor.add_inputs_to_inference_session(session, frame_idx=0, obj_ids=..., input_points=...,
input_labels=...)``), ``model(inference_session=session, frame_idx=0)``, then
``for output in model.propagate_in_video_iterator(session)`` over every frame. The clip is
:data:`~estimator.peak.inputs.vision.sam_processing.VIDEO_FRAMES` frames of the model's input size (the memory bank's
``num_maskmem`` past frames and the current one: from then on each frame attends to as much memory as
the last); ``batch_size`` is the number of objects prompted and tracked in that one video (a session holds
one video); ``image_size`` the side of the raw square frames (the processor resizes them).

The library runs the tracker's ``forward`` under ``torch.inference_mode``: there is no training step to
simulate, and a training request is refused with that reason.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

if TYPE_CHECKING:
    from estimator.peak.workload import Workload

from estimator.peak.fakes.known_values import KnownValues, know
from estimator.peak.inputs.vision.sam_processing import VIDEO_FRAMES, input_side, maker, processor_for, shapes
from estimator.peak.workload import ModelKind, StepRefusedError, Workload, model_dtype

__all__ = ["InferenceOnlyError", "StepRefusedError", "detector_tracker_workload", "video_workload"]


class InferenceOnlyError(StepRefusedError):
    """A training step asked of a model whose library runs it only under ``torch.inference_mode``."""


def detector_tracker_workload(model: nn.Module) -> Workload:
    """SAM3's video model: refused in both modes, with the reason (the objects it tracks are activation values)."""

    why = (f"{type(model).__name__} is not simulated: the objects it tracks are its detector's queries whose scores pass "
           f"score_threshold_detection, values of the activations rather than of the inputs, so the work of each frame "
           f"is not known before the real run (its tracker alone: sam3_tracker_video)")

    def refuse(m: nn.Module, x: dict[str, torch.Tensor]) -> Any:
        raise StepRefusedError(why)

    return Workload(ModelKind.VISION_BASE, dict, refuse, refuse, why)


def _session_class(model: nn.Module) -> Any:
    """The model's own inference-session class (``Sam2VideoInferenceSession``...), from its modeling module."""
    module = sys.modules[type(model).__module__]
    name = type(model).__name__.removesuffix("Model") + "InferenceSession"
    return getattr(module, name)


def video_workload(model: nn.Module, source: str, batch_size: int, image_size: int | None) -> Workload:
    """The tracking workload of the module docstring; ``source`` names the processor."""
    from torch.utils._python_dispatch import _disable_current_modes

    side = input_side(model.config) or 1024
    raw = image_size or side
    session_class = _session_class(model)
    with _disable_current_modes():  # the processor's tensors are real ones, even when asked inside the fake mode
        processor = processor_for(source, side)
        rng = np.random.default_rng(0)
        frames = rng.integers(0, 256, (VIDEO_FRAMES, raw, raw, 3), dtype=np.uint8)
        video = processor.video_processor(videos=[frames], return_tensors="pt")
        real = {"pixel_values_videos": video["pixel_values_videos"][0].to("cpu")}
    dtype = model_dtype(model)
    real = {k: v.to(dtype) for k, v in real.items()}
    objects = list(range(1, batch_size + 1))

    def infer(m: nn.Module, x: dict[str, torch.Tensor]) -> Any:
        device = next(m.parameters()).device
        session = session_class(video=x["pixel_values_videos"], video_height=raw, video_width=raw, inference_device=device,
                                inference_state_device=device, video_storage_device=device, dtype=dtype)
        # the processor's own prompt handling, on real tensors (it deep-copies the points, which a fake tensor
        # does not survive), then the few point tensors it stored handed to the model as fakes of known values
        with _disable_current_modes():
            session.inference_device = "cpu"
            processor.add_inputs_to_inference_session(
                inference_session=session, frame_idx=0, obj_ids=objects,
                input_points=[[[[raw / 2, raw / 2]] for _ in objects]], input_labels=[[[1] for _ in objects]])
        session.inference_device = device
        for frames in session.point_inputs_per_obj.values():
            for frame_idx, stored in frames.items():
                frames[frame_idx] = {k: _in_mode(v).to(device) if isinstance(v, torch.Tensor) else v for k, v in stored.items()}
        out = m(inference_session=session, frame_idx=0)
        tracker: Any = m
        for frame_out in tracker.propagate_in_video_iterator(session):
            out = frame_out
        return out

    def train_loss(m: nn.Module, x: dict[str, torch.Tensor]) -> torch.Tensor:
        raise InferenceOnlyError(f"{type(m).__name__} cannot be trained: transformers runs its forward (and "
                               f"propagate_in_video_iterator) under torch.inference_mode; inference is simulated")

    words = (f"{type(model).__name__}: a video of {VIDEO_FRAMES} frames of {raw}x{raw} px through its processor's "
             f"init_video_session (pixel_values at {side} px: {shapes(real)}), one point prompt on frame 0 for each of "
             f"{batch_size} object(s), then propagate_in_video_iterator over every frame")
    return Workload(ModelKind.VISION_BASE, maker(real), train_loss, infer, words, KnownValues)


def _in_mode(real: torch.Tensor) -> torch.Tensor:
    """``real`` inside a fake mode: a fake of it whose values are known; outside one (the truth run): itself."""

    made = torch.empty(real.shape, dtype=real.dtype)
    if not isinstance(made, torch._subclasses.fake_tensor.FakeTensor):
        return real
    return know(made, real)

