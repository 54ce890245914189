"""Inputs of the vision-language and speech-language types fed by captioners.py, pi0_inputs.py and speech_prompts.py,
shaped by transformers' own processors. Fast: tiny configs, no simulation (the CPU allocator truth of BLIP-2,
InstructBLIP and Idefics, generate's decode step with the image state included, is bench/multimodal_accuracy.py's)."""

from __future__ import annotations

import pytest
import torch

from estimator.errors import UnsupportedError
from estimator.peak.inputs.prompts.family import Media


def test_voxtral_audio_tokens_match_its_projector() -> None:
    from transformers import VoxtralConfig

    from estimator.peak.inputs.audio.speech_prompts import speech_prompt_inputs

    config = VoxtralConfig(audio_token_id=24, audio_config={"hidden_size": 64, "intermediate_size": 256, "num_mel_bins": 128},
                           text_config={"vocab_size": 512})
    made = speech_prompt_inputs(config, Media(audio_seconds=10.0), batch_size=1, text_len=8)
    # 10 s: padded to one 30 s chunk of 3000 frames; 1500 encoder positions regrouped by 256 / 64 = 4 -> 375 tokens
    assert tuple(made.tensors["input_features"].shape) == (1, 128, 3000)
    assert int((made.tensors["input_ids"][0] == 24).sum()) == 375
    assert "10 s of audio at 16000 Hz per prompt, 375 audio tokens + 8 text tokens" in made.description


def test_granite_speech_tokens_are_its_extractors_count() -> None:
    from transformers import GraniteSpeechConfig

    from estimator.peak.inputs.audio.speech_prompts import speech_prompt_inputs

    config = GraniteSpeechConfig(text_config={"model_type": "granite", "vocab_size": 512}, audio_token_index=500)
    made = speech_prompt_inputs(config, Media(audio_seconds=10.0), batch_size=1, text_len=4)
    # 160,000 samples / hop 160 + 1 = 1001 mel frames -> 500 stacked pairs -> ceil(500 / 15) windows x 15 / 5 queries
    assert tuple(made.tensors["input_features"].shape) == (1, 500, 160)
    assert int((made.tensors["input_ids"][0] == 500).sum()) == 34 * 3 == int(made.tensors["input_features_mask"].sum())


def test_instructblip_video_takes_one_clip_per_prompt() -> None:
    from transformers import InstructBlipVideoConfig

    from estimator.peak.inputs.prompts.processors import media_inputs

    config = InstructBlipVideoConfig(vision_config={"image_size": 32, "patch_size": 8, "hidden_size": 32, "num_hidden_layers": 1,
                                                    "num_attention_heads": 2, "intermediate_size": 64},
                                     text_config={"model_type": "opt", "vocab_size": 512}, num_query_tokens=4, video_token_index=500)
    made = media_inputs(config, Media(images=1), batch_size=1, text_len=8)
    assert tuple(made.tensors["pixel_values"].shape) == (1, 4, 3, 32, 32)
    assert made.image_tokens == 16  # 4 query tokens x the processor's 4 frames
    with pytest.raises(UnsupportedError, match="one clip of 4 frames"):
        media_inputs(config, Media(images=2), batch_size=1, text_len=8)


def test_pi0_is_fed_its_processors_inputs() -> None:
    from transformers import PI0Config, PI0ForConditionalGeneration

    from estimator.peak.inputs.vision.pi0 import workload

    config = PI0Config(vlm_config={"model_type": "paligemma", "text_config": {"model_type": "gemma", "vocab_size": 512,
                                                                              "hidden_size": 32, "num_hidden_layers": 1,
                                                                              "num_attention_heads": 2, "num_key_value_heads": 1,
                                                                              "head_dim": 16, "intermediate_size": 64},
                                   "vision_config": {"image_size": 32, "patch_size": 8, "hidden_size": 32, "num_hidden_layers": 1,
                                                     "num_attention_heads": 2, "intermediate_size": 64},
                                   "image_token_id": 500},
                       dit_config={"model_type": "gemma", "hidden_size": 32, "num_hidden_layers": 1, "vocab_size": 512,
                                   "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16, "intermediate_size": 64})
    with torch.device("meta"):
        model = PI0ForConditionalGeneration(config)
    work = workload(model, batch_size=1, seq_len=8, image_size=None)
    assert work is not None
    assert "1 camera image per prompt, 16 image tokens + 8 text tokens (PI0Processor" in work.description
    assert "pixel_values 1x1x3x32x32" in work.description and "state 1x32" in work.description
