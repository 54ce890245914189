"""The prompts of Gemma 4 and FunASR-Nano as their own processors make them (fast: no simulation)."""

from __future__ import annotations

from transformers import FunAsrNanoConfig, Gemma4Config

from estimator.peak.inputs.audio.features import audio_inputs
from estimator.peak.inputs.prompts.processors import Media, media_inputs


def test_gemma4_image_becomes_its_soft_tokens_between_boi_and_eoi() -> None:
    config = Gemma4Config(vision_config={"hidden_size": 32, "num_hidden_layers": 1}, image_token_id=501, boi_token_id=502,
                          eoi_token_id=503)
    made = media_inputs(config, Media(images=1), batch_size=1, text_len=4)
    ids = made.tensors["input_ids"][0].tolist()
    # a 224 px image resized within 280 soft tokens of 3x3 patches of 16 px: 768 px, 48x48 patches, 256 soft tokens
    assert ids.count(501) == made.image_tokens == 256
    assert ids.index(502) + 1 == ids.index(501) and ids.index(503) == ids.index(501) + 256
    assert tuple(made.tensors["pixel_values"].shape) == (1, 2520, 3 * 16 * 16)
    assert "pixel_values" in made.description


def test_fun_asr_nano_prompt_has_one_audio_token_per_feature_frame() -> None:
    config = FunAsrNanoConfig()
    made = audio_inputs(config, Media(audio_seconds=6.0), batch_size=1, text_len=4)
    frames = made.tensors["input_features"].shape[1]
    assert int((made.tensors["input_ids"][0] == config.audio_token_id).sum()) == frames == 100  # 6 s in 60 ms frames
    assert "input_features" in made.description
