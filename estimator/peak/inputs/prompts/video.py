"""Video inputs as the model's own video processor makes them (``--video-frames``).

A prompt of a video-language model carries one video of ``video_frames`` frames, written into the
prompt as the model's chat template writes a video (Qwen-VL's ``<|vision_start|><|video_pad|><|vision_end|>``,
LLaVA-NeXT-Video's / LLaVA-OneVision's / Video-LLaVA's / InternVL's ``<video>``, GLM-4V's
``<|begin_of_video|><|video|><|end_of_video|>``, VideoLLaMA3's ``<|vision_start|><|video_pad|><|vision_end|>``),
and the processor (:mod:`estimator.peak.inputs.prompts.processors`) expands it as it does a real video:

- **Qwen2-VL / 2.5-VL / 3-VL (and Qwen3.5, Cosmos3-Omni, Qwen4-Exp, EXAONE 4.5), GLM-4V / 4.6V / GA, VideoLLaMA3**: the video processor resizes the frames to its patch grid
  (min/max pixels), stacks ``temporal_patch_size`` frames into one patch (an odd frame count is padded with
  the last frame) and returns ``pixel_values_videos`` (flattened patches) and ``video_grid_thw``; the
  processor writes one video token per merged patch (Qwen3-VL, GLM-4V and VideoLLaMA3 also write each
  frame group's timestamp, from the video's metadata).
- **LLaVA-NeXT-Video, LLaVA-OneVision, Video-LLaVA**: ``pixel_values_videos`` (B, T, C, H, W) at the tower's
  resolution; the processor writes the tower's patches of every frame (pooled as the model pools them).
- **InternVL**: every frame is one tile of ``pixel_values``, written ``FrameN: <img>`` + the tile's tokens + ``</img>``.
- **SmolVLM2**: every frame an image of ``pixel_values`` at the tower's size, with its timestamp, after the
  processor's intro sentence ("You are provided the following series of N frames...").

The frames are random ``uint8`` frames of the size asked (``--image-size``; default: the video processor's
resolution, else the family's image default), passed as already sampled (``do_sample_frames=False``, with
metadata saying they were taken at the processor's own sampling rate), so the model sees exactly
``video_frames`` frames. Nothing here runs a repository's code: the video processor class is transformers'
own for the ``model_type``, its settings the repo's (the processor config's ``video_processor``, else
``video_preprocessor_config.json``, else ``preprocessor_config.json``, the order transformers reads them in),
else the model config's patching.
"""

from __future__ import annotations

import typing
from typing import Any

import numpy as np

__all__ = ["VIDEO_PLACEHOLDERS", "frame_size", "simulated_video_types", "video_call", "video_processor", "video_simulated",
           "video_words"]

_QWEN = "<|vision_start|><|video_pad|><|vision_end|>"
_GLM = "<|begin_of_video|><|video|><|end_of_video|>"

# model_type -> what its chat template writes in the prompt for one video
VIDEO_PLACEHOLDERS: dict[str, str] = {
    "qwen2_vl": _QWEN, "qwen2_5_vl": _QWEN, "qwen3_vl": _QWEN, "qwen3_vl_moe": _QWEN, "qwen3_5": _QWEN, "qwen3_5_moe": _QWEN,
    "llava_next_video": "<video>", "llava_onevision": "<video>", "video_llava": "<video>",
    "internvl": "<video>",
    "glm4v": _GLM, "glm46v": _GLM, "glmga": _GLM,
    "video_llama_3": "<|video_pad|>",
    "cosmos3_omni": _QWEN, "qwen4_exp": _QWEN,  # Qwen3VLProcessor
    "exaone4_5": "<|video_pad|>",
    "smolvlm": "<video>",  # SmolVLM2: the frames become images, each with its timestamp, after a spoken intro
    # MiniCPM-V 4.6 / 4.7, MiniCPM-o OCR: each frame <image> + its tokens + </image> (estimator.peak.inputs.prompts.minicpm_family)
    "minicpmv4_6": "<|video_pad|>", "minicpmv4_7": "<|video_pad|>", "minicpm_ocr": "<|video_pad|>",
}
# Not here yet: Kimi-K2.5 (its video chunks' patches do not match its tower's split on these inputs), Muse-Glimmer
# (its processor wants the video processor's returned metadata), HyperCLOVA X (its template's video duration).

def video_simulated(model_type: str) -> bool:
    """Whether prompts of ``model_type`` can carry a video made by its video processor (else ``--video-frames`` is refused)."""
    return model_type in VIDEO_PLACEHOLDERS


def simulated_video_types() -> list[str]:
    return sorted(VIDEO_PLACEHOLDERS)


def _valid_keys(cls: type) -> set[str]:
    """The settings a video processor class takes (its ``valid_kwargs`` TypedDict, inherited keys included)."""
    kwargs = getattr(cls, "valid_kwargs", None)
    if kwargs is None:
        return set()
    try:
        return set(typing.get_type_hints(kwargs))
    except Exception:  # noqa: BLE001 - an annotation transformers cannot resolve here: the plain ones
        return {k for c in getattr(kwargs, "__mro__", (kwargs,)) for k in getattr(c, "__annotations__", {})}


def video_processor(model_type: str, family: Any, config: Any, preprocessor: dict[str, Any] | None,
                    processor: dict[str, Any] | None, sibling: str = "") -> Any:
    """The model type's transformers video processor, set as ``from_pretrained`` would set it: the processor
    config's ``video_processor`` entry, else ``preprocessor`` (the repo's ``video_preprocessor_config.json``, else
    its ``preprocessor_config.json``), else the model config's patching. ``sibling``: the type sharing its
    processor class whose video processor transformers maps (Qwen3-VL's for Qwen3-VL-MoE)."""
    import transformers
    from transformers.models.auto.video_processing_auto import VIDEO_PROCESSOR_MAPPING_NAMES

    names = VIDEO_PROCESSOR_MAPPING_NAMES.get(model_type) or VIDEO_PROCESSOR_MAPPING_NAMES.get(sibling) or {}
    name = family.classes.get("video_processor") or next(iter(names.values()), None)
    if name is None:
        raise ValueError(f"transformers has no video processor for {model_type}")
    cls = getattr(transformers, name)
    nested = (processor or {}).get("video_processor")
    settings = nested if isinstance(nested, dict) else preprocessor
    if not settings:
        settings = family.image_processor(config)
    valid = _valid_keys(cls)
    return cls(**{k: v for k, v in settings.items() if k in valid and k not in ("do_sample_frames", "video_metadata")})


def frame_size(proc: Any) -> int | None:
    """The side a fixed-size video processor resizes frames to (None where it keeps their size: Qwen-VL's pixel range)."""
    size = getattr(getattr(proc, "video_processor", None), "size", None)
    height, shortest, longest = (getattr(size, k, None) if not isinstance(size, dict) else size.get(k)
                                 for k in ("height", "shortest_edge", "longest_edge"))
    if isinstance(height, int):
        return height
    return shortest if isinstance(shortest, int) and longest is None else None


def video_call(proc: Any, frames: int, size: int, batch_size: int, rng: np.random.Generator) -> dict[str, Any]:
    """The processor call's video arguments: one video of ``frames`` random frames of ``size`` px square per
    prompt, as already sampled at the video processor's own rate (its ``fps``, else 1 frame a second)."""
    from transformers.video_utils import VideoMetadata

    video = getattr(proc, "video_processor", None)
    fps = float(getattr(video, "fps", None) or 1.0)
    videos = [rng.integers(0, 256, (frames, size, size, 3), dtype=np.uint8) for _ in range(batch_size)]
    metadata = [VideoMetadata(total_num_frames=frames, fps=fps, width=size, height=size, duration=frames / fps,
                              frames_indices=list(range(frames))) for _ in range(batch_size)]
    return {"videos": videos, "video_metadata": metadata, "do_sample_frames": False}


def video_words(frames: int, size: int, tokens: int, shared: bool) -> str:
    """The notes' words for the video of each prompt."""
    what = "image and video tokens" if shared else "video tokens"
    return f"{frames} video frame{'s' if frames != 1 else ''} of {size}x{size} px per prompt (one video), {tokens} {what}"
