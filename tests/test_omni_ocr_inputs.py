"""The prompts of Nemotron-3-Nano-Omni and Unlimited-OCR as their own processors make them, and Unlimited-OCR's
coverage small config running its real forward on them (fast: no simulation).

The truth is the transformers processor class built here by hand (its image processor at its defaults but for what
the model config fixes), called on the same random images and the prompt the chat template writes (one ``<image>``
per image, then the text), with the stand-in tokenizer; the token counts are also worked out by hand from the image
processors' arithmetic. Unlimited-OCR's processor also returns Python lists (its local tiles' counts and grids), which
the inputs carry as they are (``MediaInputs.plain``).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers

from estimator.peak.inputs.prompts.family import family_tokenizer
from estimator.peak.inputs.prompts.processors import Media, lookup, media_inputs


def _images(n: int, size: int) -> list[np.ndarray]:
    rng = np.random.default_rng(0)  # media_inputs' images: the same generator, the same order
    return [rng.integers(0, 256, (size, size, 3), dtype=np.uint8) for _ in range(n)]


def _tensors(out: dict) -> dict[str, torch.Tensor]:
    return {k: v for k, v in out.items() if isinstance(v, torch.Tensor) and k != "attention_mask"}


def _nemotron_config() -> object:
    return transformers.NemotronH_Omni_Reasoning_V3_Config(text_config={"vocab_size": 512}, image_token_id=500)


@pytest.mark.parametrize(("images", "size", "per_image"), [
    (1, 64, 256),  # 4x4 patches of 16 px, scaled up to the 1024-patch minimum: 32x32, pixel-shuffled 2x2 -> 256
    (2, 600, 361),  # 600 / 16 = 37.5 -> 38x38 = 1444 patches (inside 1024..13312), 2x2 -> 361
])
def test_nemotron_omni_inputs_equal_the_processors_call(images: int, size: int, per_image: int) -> None:
    config = _nemotron_config()
    made = media_inputs(config, Media(images=images, image_size=size), batch_size=1, text_len=4)
    family = lookup("nemotron_h_omni")
    assert family is not None
    proc = transformers.NemotronH_Omni_Reasoning_V3Processor(
        image_processor=transformers.NemotronH_Omni_Reasoning_V3ImageProcessor(patch_size=16, downsample_ratio=0.5),
        video_processor=transformers.NemotronH_Omni_Reasoning_V3VideoProcessor(), tokenizer=family_tokenizer(config, family),
        feature_extractor=transformers.ParakeetFeatureExtractor())
    real = _tensors(proc(text=["<image>" * images + " a" * 4], images=_images(images, size), return_tensors="pt"))
    assert set(made.tensors) == set(real) == {"input_ids", "pixel_values", "image_grid_hw"}
    for name, tensor in real.items():
        assert torch.equal(made.tensors[name], tensor), name
    ids = made.tensors["input_ids"][0].tolist()
    assert ids.count(500) == made.image_tokens == images * per_image
    assert len(ids) == images * (per_image + 2) + 4  # <img> ... </img> around each image
    assert tuple(made.tensors["pixel_values"].shape) == (images * per_image * 4, 3 * 16 * 16)


def _ocr_config() -> object:
    return transformers.UnlimitedOcrConfig(text_config={"vocab_size": 512}, image_token_id=500)


def _plain(out: dict) -> dict[str, object]:
    return {k: v for k, v in out.items() if not isinstance(v, torch.Tensor)}


# (images, size asked (None: the processor's own 1024 px), <image> tokens per image, local tiles per image)
_OCR = [
    # a 600 px image (not over the 640 px tile) is the global view alone: 1024 px padded square, 16 px SAM patches,
    # two stride-2 convolutions -> 16x16 queries, a newline after each row and the view separator: 16 * 17 + 1
    (1, 600, 273, 0),
    (2, 600, 273, 0),
    # over 640 px: also 2x2 tiles of 640 px (the canvas nearest the image's shape with at least min_patches 2 tiles),
    # each 40x40 patches -> 10x10 queries; the tiles' grid is 20 rows of 20 queries + a newline: 420, then the global's 273
    (1, 700, 420 + 273, 4),
    (1, None, 420 + 273, 4),
    (2, None, 420 + 273, 4),
]


@pytest.mark.parametrize(("images", "size", "per_image", "tiles"), _OCR)
def test_unlimited_ocr_inputs_equal_the_processors_call(images: int, size: int | None, per_image: int, tiles: int) -> None:
    """The tensors and the plain values (the tiles' counts and grids, Python lists) equal the processor's own call."""
    config = _ocr_config()
    made = media_inputs(config, Media(images=images, image_size=size), batch_size=1, text_len=4)
    assert made.image_size == (size or 1024)  # the processor's own resolution: the SAM tower's image_size
    family = lookup("unlimited_ocr")
    assert family is not None
    proc = transformers.UnlimitedOcrProcessor(image_processor=transformers.UnlimitedOcrImageProcessor(),
                                              tokenizer=family_tokenizer(config, family), patch_size=16, downsample_ratio=4)
    out = proc(text=["<image>" * images + " a" * 4], images=_images(images, size or 1024), return_tensors="pt")
    real = _tensors(out)
    assert set(made.tensors) == set(real) == {"input_ids", "pixel_values", *(("pixel_values_local",) if tiles else ())}
    for name, tensor in real.items():
        assert torch.equal(made.tensors[name], tensor), name
    assert made.plain == _plain(out) == {"num_local_patches": [tiles] * images,
                                         "patches_grid": [[2, 2] if tiles else [1, 1]] * images}
    assert made.image_tokens == images * per_image
    assert tuple(made.tensors["pixel_values"].shape) == (images, 3, 1024, 1024)
    if tiles:
        assert tuple(made.tensors["pixel_values_local"].shape) == (images * tiles, 3, 640, 640)


def test_unlimited_ocr_local_tiles_reach_the_forward() -> None:
    """The workload passes the tiles' counts and grid, Python lists as the processor made them, to the forward that
    names them (``plain_inputs``); tensors become fakes as before."""
    from estimator.peak.inputs.prompts.family import plain_inputs
    from estimator.peak.inputs.prompts.media import media_workload
    from testkit.multimodal_cases import MM_CASES

    case = MM_CASES["unlimited_ocr_tiles"]
    model = case.build_on("meta")
    made = media_inputs(model.config, Media(images=2, image_size=case.image_size), batch_size=1, text_len=8)
    assert plain_inputs(model, made.plain) == made.plain == {"num_local_patches": [4, 4], "patches_grid": [[2, 2], [2, 2]]}
    assert plain_inputs(model, {"grids": [[1, 1]]}) == {}  # a value the forward does not name stays out
    inputs = media_workload(model, made).make_inputs()
    assert inputs["num_local_patches"] == [4, 4] and inputs["patches_grid"] == [[2, 2], [2, 2]]
    assert tuple(inputs["pixel_values_local"].shape) == (8, 3, 640, 640)


def test_unlimited_ocr_small_config_runs_forward_on_images_for_real() -> None:
    """The coverage small config (testkit/shrink_sam.py: the SAM stage's last width is the CLIP's) runs its real
    forward and backward on its processor's inputs, the local tiles of a 700 px image included."""
    from estimator.peak.inputs.prompts.family import plain_inputs
    from testkit.coverage import small_config

    small, _name, model, level, reason = small_config("unlimited_ocr")
    assert small is not None and level == 1, reason
    vision = small["vision_config"]
    assert vision["sam_config"]["downsample_channels"][-1] == vision["encoder_config"]["hidden_size"]
    made = media_inputs(model.config, Media(images=2), batch_size=1, text_len=8)
    assert made.image_tokens == 2 * 3  # 64 px: 4x4 SAM patches -> 1x1 query, its newline, the separator
    out = model.train()(**made.tensors, **plain_inputs(model, made.plain), labels=made.tensors["input_ids"])
    out.loss.backward()
    assert out.logits.shape[1] == 2 * 3 + 8
    tiled = media_inputs(model.config, Media(images=1, image_size=700), batch_size=1, text_len=8)
    assert tiled.image_tokens == 420 + 3  # 2x2 tiles of 640 px: 20 rows of 20 queries + a newline, then the global 3
    out = model(**tiled.tensors, **plain_inputs(model, tiled.plain), labels=tiled.tensors["input_ids"])
    out.loss.backward()
    assert out.logits.shape[1] == 423 + 8
