"""Tiny video-language models for checking the simulated peak with ``--video-frames`` (one video per prompt).

Each case is a :class:`~testkit.multimodal_cases.MultimodalCase` marked ``extra={"video": True}``: the truth
and simulation harness (:mod:`testkit.multimodal_truth`) reads its "images" count as the video's frames. The
configs are those of :mod:`testkit.multimodal_cases` where the family is there, else shrunk the same way.
"""

from __future__ import annotations

from dataclasses import replace

from testkit.multimodal_cases import _TEXT, _VISION, MM_CASES, MultimodalCase

__all__ = ["VIDEO_CASES", "VIDEO_FRAMES"]

_VIDEO = {"video": True}
_MROPE = {"rope_type": "default", "mrope_section": [2, 3, 3], "rope_theta": 10000.0}
_CLIP = {"model_type": "clip_vision_model", **_VISION, "image_size": 32, "patch_size": 8, "projection_dim": 32}


def _from(name: str) -> MultimodalCase:
    return replace(MM_CASES[name], name=f"{name}_video", extra=_VIDEO)


VIDEO_CASES: dict[str, MultimodalCase] = {c.name: c for c in [
    _from("qwen2_5_vl"),  # frames resized to the video processor's pixel range, 2 frames per temporal patch
    _from("glm4v"),  # per-frame image tokens with timestamps
    _from("internvl"),  # every frame one tile of pixel_values
    _from("llava_onevision"),  # pixel_values_videos, each frame's patches pooled 2x2
    _from("smolvlm"),  # SmolVLM2: each frame an image (pixel_values) with its timestamp, after the video's intro
    *(_from(t) for t in ("minicpmv4_6", "minicpmv4_7", "minicpm_ocr")),  # each frame one 448 px crop, <image>..</image>
    MultimodalCase("llava_next_video_video", "llava_next_video", {
        "text_config": {"model_type": "llama", **_TEXT}, "vision_config": _CLIP,
        "image_grid_pinpoints": [[32, 64], [64, 32], [64, 64]], "image_token_index": 500, "video_token_index": 501,
        "spatial_pool_stride": 2}, extra=_VIDEO),
    MultimodalCase("video_llava_video", "video_llava", {
        "text_config": {"model_type": "llama", **_TEXT}, "vision_config": _CLIP,
        "image_token_index": 500, "video_token_index": 501}, extra=_VIDEO),
    MultimodalCase("qwen3_vl_video", "qwen3_vl", {
        "text_config": {**_TEXT, "rope_parameters": {**_MROPE, "mrope_interleaved": True}},
        "vision_config": {"depth": 2, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "patch_size": 8,
                          "spatial_merge_size": 2, "temporal_patch_size": 2, "out_hidden_size": 64,
                          "num_position_embeddings": 64, "deepstack_visual_indexes": [0]},
        "image_token_id": 500, "video_token_id": 501, "vision_start_token_id": 502, "vision_end_token_id": 503},
        image_size=64, extra=_VIDEO),
    MultimodalCase("exaone4_5_video", "exaone4_5", {  # Qwen2-VL's video processor, <|video_pad|> without start/end tokens
        "text_config": {"model_type": "exaone4", **_TEXT, "sliding_window": 64, "layer_types": ["sliding_attention", "full_attention"]},
        "vision_config": {"depth": 1, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "num_key_value_heads": 2,
                          "patch_size": 8, "spatial_merge_size": 2, "temporal_patch_size": 2, "out_hidden_size": 64,
                          "window_size": 32, "fullatt_block_indexes": [0]},
        "image_token_id": 500, "video_token_id": 501}, image_size=64, extra=_VIDEO),
    MultimodalCase("video_llama_3_video", "video_llama_3", {  # "Time t s:" per frame, similar patches of frames compressed
        "text_config": {"model_type": "qwen2", **_TEXT},
        "vision_config": {**_VISION, "patch_size": 8},
        "image_token_id": 500, "video_token_id": 501}, image_size=64, extra=_VIDEO),
]}

# the frame counts each case is run at
VIDEO_FRAMES: dict[str, tuple[int, int]] = {name: (2, 4) for name in VIDEO_CASES}
