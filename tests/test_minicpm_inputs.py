"""The prompts of MiniCPM-V 4.6 / 4.7 and MiniCPM-o OCR as their own processors make them (fast: no simulation).

The truth is the transformers processor class built here by hand (its image and video processors at their defaults
but for the config's ``patch_size`` and ``downsample_mode``), called on the same random images and the prompt the
chat template writes (one ``<|image_pad|>`` per image, then the text), with the stand-in tokenizer; the token counts
are also checked against the image processor's arithmetic worked out by hand.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers

from estimator.peak.inputs.prompts.family import family_tokenizer
from estimator.peak.inputs.prompts.processors import Media, lookup, media_inputs

MARKERS = {"image_start_id": 501, "image_end_id": 502, "slice_start_id": 503, "slice_end_id": 504, "newline_id": 505}
TYPES = {  # model_type -> (config, processor, image processor, video processor)
    "minicpmv4_6": ("MiniCPMV4_6Config", "MiniCPMV4_6Processor", "MiniCPMV4_6ImageProcessor", "MiniCPMV4_6VideoProcessor"),
    "minicpmv4_7": ("MiniCPMV4_7Config", "MiniCPMV4_7Processor", "MiniCPMV4_6ImageProcessor", "MiniCPMV4_6VideoProcessor"),
    "minicpm_ocr": ("MiniCPMOcrConfig", "MiniCPMOcrProcessor", "MiniCPMOcrImageProcessor", "MiniCPMOcrVideoProcessor"),
}


def _config(model_type: str) -> object:
    names = TYPES[model_type]
    extra = MARKERS if model_type == "minicpmv4_7" else {}
    return getattr(transformers, names[0])(text_config={"model_type": "qwen3_5_text", "vocab_size": 512},
                                           vision_config={"patch_size": 14}, image_token_id=500, video_token_id=506, **extra)


def _real(model_type: str, config: object, images: int, size: int, text_len: int) -> dict[str, torch.Tensor]:
    """The processor's own ``__call__``, built without the estimator's family code but for its stand-in tokenizer."""
    processor, image_processor, video_processor = (getattr(transformers, name) for name in TYPES[model_type][1:])
    settings = {"patch_size": 14, "downsample_mode": config.downsample_mode}  # type: ignore[attr-defined]
    family = lookup(model_type)
    assert family is not None
    proc = processor(image_processor=image_processor(**settings), video_processor=video_processor(), tokenizer=family_tokenizer(config, family))
    rng = np.random.default_rng(0)  # media_inputs' images: the same generator, the same order
    pictures = [rng.integers(0, 256, (size, size, 3), dtype=np.uint8) for _ in range(images)]
    out = proc(text=["<|image_pad|>" * images + " a" * text_len], images=[pictures], return_tensors="pt")
    return {k: v for k, v in out.items() if isinstance(v, torch.Tensor) and k != "attention_mask"}


@pytest.mark.parametrize("model_type", sorted(TYPES))
@pytest.mark.parametrize(("images", "size"), [(1, None), (2, 900)])
def test_inputs_equal_the_processors_call(model_type: str, images: int, size: int | None) -> None:
    config = _config(model_type)
    made = media_inputs(config, Media(images=images, image_size=size), batch_size=1, text_len=4)
    real = _real(model_type, config, images, size or 448, 4)
    assert set(made.tensors) == set(real)
    for name, tensor in real.items():
        assert torch.equal(made.tensors[name], tensor), name
    # by hand: 16x merges 4x4 patches of 14 px (4x: 2x2), a crop's side rounded to 56 px (28 px); 448 px is one crop
    # (32x32 patches); 900 px is over 448² four times: a 2x2 grid of 450 px slices, each resized to 448 px (and
    # 448 px in 4x mode), plus the 448 px overview
    per_crop = 64 if config.downsample_mode == "16x" else 256  # type: ignore[attr-defined]
    crops = 1 if size is None else 5
    assert made.image_tokens == images * crops * per_crop
    assert tuple(made.tensors["target_sizes"].shape) == (images * crops, 2)
    assert tuple(made.tensors["pixel_values"].shape) == (1, 3, 14, images * crops * 32 * 32 * 14)
    # <image_id>N</image_id> <image> ... </image>, then per slice <slice> ... </slice> and one newline between the rows
    markers = 5 + (crops - 1) * 2 + (1 if size else 0)
    assert made.tensors["input_ids"].shape[1] == images * (crops * per_crop + markers) + 4


def test_minicpmv4_7_markers_take_the_configs_ids() -> None:
    """4.7's rotary positions find the crops by the config's marker ids, the slice rows by its ``newline_id``."""
    made = media_inputs(_config("minicpmv4_7"), Media(images=1, image_size=900), batch_size=1, text_len=4)
    ids = made.tensors["input_ids"][0].tolist()
    assert [ids.count(MARKERS[k]) for k in ("image_start_id", "image_end_id", "slice_start_id", "slice_end_id", "newline_id")] \
        == [1, 1, 4, 4, 1]
    assert torch.equal(made.tensors["mm_token_type_ids"][0] == 1, made.tensors["input_ids"][0] == 500)


@pytest.mark.parametrize("model_type", sorted(TYPES))
def test_video_equals_the_processors_call(model_type: str) -> None:
    """``--video-frames``: one video of 4 frames (448 px, taken as already sampled), each frame ``<image>`` + its
    tokens + ``</image>``; 4.6 and OCR also number the video (``<image_id>0</image_id>``), 4.7 does not."""
    from transformers.video_utils import VideoMetadata

    config = _config(model_type)
    made = media_inputs(config, Media(video_frames=4), batch_size=1, text_len=4)
    processor, image_processor, video_processor = (getattr(transformers, name) for name in TYPES[model_type][1:])
    settings = {"patch_size": 14, "downsample_mode": config.downsample_mode}  # type: ignore[attr-defined]
    family = lookup(model_type)
    assert family is not None
    video = video_processor(**settings)
    proc = processor(image_processor=image_processor(**settings), video_processor=video, tokenizer=family_tokenizer(config, family))
    fps = float(getattr(video, "fps", None) or 1.0)
    frames = np.random.default_rng(1).integers(0, 256, (4, 448, 448, 3), dtype=np.uint8)  # media_inputs' seed + 1
    metadata = VideoMetadata(total_num_frames=4, fps=fps, width=448, height=448, duration=4 / fps, frames_indices=[0, 1, 2, 3])
    real = proc(text=["<|video_pad|>" + " a" * 4], videos=[frames], video_metadata=[metadata], do_sample_frames=False,
                return_tensors="pt")
    real = {k: v for k, v in real.items() if isinstance(v, torch.Tensor) and k != "attention_mask"}
    assert set(made.tensors) == set(real)
    for name, tensor in real.items():
        assert torch.equal(made.tensors[name], tensor), name
    per_frame = 64 if config.downsample_mode == "16x" else 256  # type: ignore[attr-defined]
    numbered = 0 if model_type == "minicpmv4_7" else 3
    assert made.tensors["input_ids"].shape[1] == numbered + 4 * (per_frame + 2) + 4
    assert int((made.tensors["input_ids"][0] == config.video_token_id).sum()) == 4 * per_frame  # type: ignore[attr-defined]


def test_a_vision_tower_asked_alone_takes_the_image_processor_s_own_downsample_mode() -> None:
    """The tower alone (``minicpm_ocr_vision``) has no ``downsample_mode``: the settings leave it to the image
    processor's default instead of failing (the tower was simulated with images before the family existed)."""
    from types import SimpleNamespace

    from estimator.peak.inputs.prompts.minicpm_family import _image

    parent = transformers.AutoConfig.for_model("minicpm_ocr")
    alone = _image(SimpleNamespace(vision_config=parent.vision_config))
    assert "downsample_mode" not in alone and alone["patch_size"] == parent.vision_config.patch_size
    assert _image(parent)["downsample_mode"] == parent.downsample_mode
