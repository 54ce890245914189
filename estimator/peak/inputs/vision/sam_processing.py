"""The SAM family's processors and input tensors, shared by :mod:`estimator.peak.inputs.vision.sam` (images and prompts)
and :mod:`estimator.peak.inputs.vision.sam_video` (video sessions): the model's input side, its transformers processor set to
it, the processor's real outputs and their stand-ins inside the fake mode.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from estimator.peak.inputs.vision.models import known_inputs_maker

__all__ = ["VIDEO", "VIDEO_FRAMES", "input_side", "maker", "processed", "processor_for", "shapes"]

# video tracker model type -> the type whose processor feeds it
VIDEO = {"sam2_video": "sam2_video", "sam3_tracker_video": "sam3_tracker_video", "edgetam_video": "sam2_video"}
VIDEO_FRAMES = 8  # the clip: the memory bank's num_maskmem (7) past frames and the current one


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


def maker(real: dict[str, torch.Tensor]) -> Callable[[], dict[str, torch.Tensor]]:
    """Fakes of the processor's tensors inside a fake mode (integers known), the tensors themselves outside one:
    :func:`estimator.peak.inputs.vision.models.known_inputs_maker`, which every image provider uses."""

    return known_inputs_maker(real)


def shapes(real: dict[str, torch.Tensor]) -> str:
    return ", ".join(f"{k} {'x'.join(map(str, v.shape))}" for k, v in real.items())
