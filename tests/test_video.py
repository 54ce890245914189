"""``--video-frames``: one video per prompt, made by the model's own video processor (docs/multimodal.md).

Fast checks only (the peaks against the CPU allocator are ``bench/multimodal_accuracy.py``'s video cases):
the processor's outputs for a video (the frames, the grid and the video tokens the model will look for),
the option's parsing and refusal for a model without video, and the page's share link round trip.
"""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import parse_qsl

import pytest

from estimator.errors import BadOptionError, UnsupportedError
from estimator.options import parse_options
from estimator.peak.inputs.prompts.processors import Media, media_inputs
from testkit.video_cases import VIDEO_CASES


def test_qwen_video_is_patched_and_merged_as_its_processor_does() -> None:
    case = VIDEO_CASES["qwen2_5_vl_video"]
    config = case.make_config()
    vision = config.vision_config
    # the repo's preprocessor_config.json sets the video processor too (transformers' fallback): 64 px frames kept
    preprocessor = {"min_pixels": 32 * 32, "max_pixels": 128 * 128, "patch_size": vision.patch_size,
                    "merge_size": vision.spatial_merge_size, "temporal_patch_size": vision.temporal_patch_size}
    made = media_inputs(config, Media(video_frames=4, image_size=64, preprocessor=preprocessor), batch_size=1, text_len=8)
    t, h, w = made.tensors["video_grid_thw"][0].tolist()
    assert (h, w) == (64 // vision.patch_size, 64 // vision.patch_size)
    assert t == 4 // vision.temporal_patch_size  # two frames per temporal patch
    assert made.tensors["pixel_values_videos"].shape == (t * h * w, 3 * vision.temporal_patch_size * vision.patch_size**2)
    tokens = t * h * w // vision.spatial_merge_size**2  # one token per merged patch, as the model's get_video_features
    assert int((made.tensors["input_ids"][0] == config.video_token_id).sum()) == tokens == made.image_tokens
    assert "pixel_values" not in made.tensors  # a video only: no image unless asked
    assert made.description.startswith(f"4 video frames of 64x64 px per prompt (one video), {tokens} video tokens + 8 text tokens")
    assert "pixel_values_videos" in made.description


def test_llava_next_video_frames_at_the_towers_resolution() -> None:
    case = VIDEO_CASES["llava_next_video_video"]
    config = case.make_config()
    made = media_inputs(config, Media(images=1, video_frames=3), batch_size=2, text_len=4)
    side = config.vision_config.image_size
    assert made.tensors["pixel_values_videos"].shape == (2, 3, 3, side, side)
    assert made.tensors["pixel_values"].shape[0] == 2  # the image beside the video
    ids = made.tensors["input_ids"][0]
    video = int((ids == config.video_token_index).sum())
    pooled = (side // config.vision_config.patch_size // config.spatial_pool_stride) ** 2
    assert video == 3 * pooled  # each frame's patches pooled by spatial_pool_stride, as the model pools them
    assert made.image_tokens == video + int((ids == config.image_token_index).sum())


def test_option_parsed_reported_and_refused_without_video(tmp_path: Path) -> None:
    from estimator import estimate

    options = parse_options(mode="inference", video_frames="8")
    assert options.work.shape.video_frames == 8 and options.shaping(None)["video_frames"] == 8
    assert "video_frames" not in parse_options(mode="inference").shaping(None)
    with pytest.raises(BadOptionError, match="video"):
        parse_options(mode="inference", video_frames=-1)
    config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 32, "intermediate_size": 64,
              "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2, "vocab_size": 128}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(UnsupportedError, match=r"--video-frames shapes video-language models .*\(llama\) is not one of them"):
        estimate(str(tmp_path), mode="inference", dtypes=["float32"], video_frames=4)


def test_share_link_round_trip() -> None:
    from estimator_app.form import FormState, from_query, to_query

    parsed = from_query([("model", "Qwen/Qwen2.5-VL-3B-Instruct"), ("mode", "inference"), ("video", "16")])
    assert parsed.state.video == 16 and not parsed.notices
    assert parsed.state.estimate_kwargs()["video_frames"] == 16
    assert "video=16" in to_query(parsed.state)
    assert from_query(parse_qsl(to_query(parsed.state), keep_blank_values=True)).state == parsed.state
    assert "video=none" in to_query(FormState(model="gpt2"))
    assert FormState(model="gpt2").estimate_kwargs()["video_frames"] is None


def test_repo_video_preprocessor_config_wins_over_preprocessor_config() -> None:
    """A repo's video_preprocessor_config.json is read with the other processor files and sets the video
    processor (transformers reads it before preprocessor_config.json)."""
    from estimator.source.resolve import processor_configs

    video_settings = {"min_pixels": 32 * 32, "max_pixels": 32 * 32, "patch_size": 8, "merge_size": 2, "temporal_patch_size": 2}
    files = {"preprocessor_config.json": {"min_pixels": 64 * 64, "max_pixels": 64 * 64}, "video_preprocessor_config.json": video_settings}
    found = processor_configs({"vision_config": {}}, tuple(files), files.get)
    assert found["video_preprocessor_config"] == video_settings
    config = VIDEO_CASES["qwen2_5_vl_video"].make_config()
    made = media_inputs(config, Media(video_frames=2, image_size=64, preprocessor=found["preprocessor_config"],
                                      video_preprocessor=found["video_preprocessor_config"]), batch_size=1, text_len=1)
    assert made.tensors["video_grid_thw"][0].tolist() == [1, 4, 4]  # 64 px frames resized to 32x32 px: 4x4 patches of 8 px
