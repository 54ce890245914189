"""The prompts of Nemotron-3-Nano-Omni and Unlimited-OCR as their own processors make them, and Unlimited-OCR's
coverage small config running its real forward on them (fast: no simulation).

The truth is the transformers processor class built here by hand (its image processor at its defaults but for what
the model config fixes), called on the same random images and the prompt the chat template writes (one ``<image>``
per image, then the text), with the stand-in tokenizer; the token counts are also worked out by hand from the image
processors' arithmetic.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers

from estimator.peak.family import _tokenizer
from estimator.peak.processors import Media, lookup, media_inputs


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
        video_processor=transformers.NemotronH_Omni_Reasoning_V3VideoProcessor(), tokenizer=_tokenizer(config, family),
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


@pytest.mark.parametrize("images", [1, 2])
def test_unlimited_ocr_inputs_equal_the_processors_call(images: int) -> None:
    config = _ocr_config()
    made = media_inputs(config, Media(images=images, image_size=600), batch_size=1, text_len=4)
    family = lookup("unlimited_ocr")
    assert family is not None
    proc = transformers.UnlimitedOcrProcessor(image_processor=transformers.UnlimitedOcrImageProcessor(),
                                              tokenizer=_tokenizer(config, family), patch_size=16, downsample_ratio=4)
    real = _tensors(proc(text=["<image>" * images + " a" * 4], images=_images(images, 600), return_tensors="pt"))
    assert set(made.tensors) == set(real) == {"input_ids", "pixel_values"}
    for name, tensor in real.items():
        assert torch.equal(made.tensors[name], tensor), name
    # a 600 px image (not over the 640 px tile) is the global view alone: 1024 px padded square, 16 px SAM patches,
    # two stride-2 convolutions -> 16x16 queries, a newline after each row and the view separator: 16 * 17 + 1
    assert made.image_tokens == images * 273
    assert tuple(made.tensors["pixel_values"].shape) == (images, 3, 1024, 1024)


def test_unlimited_ocr_local_tiles_are_refused() -> None:
    """An image over ``tile_size`` is also cut into tiles whose counts the forward reads as Python lists."""
    with pytest.raises(ValueError, match="local tiles .*over 640 px.* not simulated"):
        media_inputs(_ocr_config(), Media(images=1, image_size=700), batch_size=1, text_len=4)


def test_unlimited_ocr_small_config_runs_forward_on_images_for_real() -> None:
    """The coverage small config (testkit/shrink_sam.py: the SAM stage's last width is the CLIP's) runs its real
    forward and backward on its processor's inputs."""
    from testkit.coverage import small_config

    small, _name, model, level, reason = small_config("unlimited_ocr")
    assert small is not None and level == 1, reason
    vision = small["vision_config"]
    assert vision["sam_config"]["downsample_channels"][-1] == vision["encoder_config"]["hidden_size"]
    made = media_inputs(model.config, Media(images=2), batch_size=1, text_len=8)
    assert made.image_tokens == 2 * 3  # 64 px: 4x4 SAM patches -> 1x1 query, its newline, the separator
    out = model.train()(**made.tensors, labels=made.tensors["input_ids"])
    out.loss.backward()
    assert out.logits.shape[1] == 2 * 3 + 8
