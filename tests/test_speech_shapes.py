"""Speech inputs made without torchaudio, and text-to-speech durations (estimator.peak.inputs.audio.shapes, tts_inputs).

- Granite Speech 5 and Fun-ASR-Nano: their transformers feature extractors run with torchaudio's calls answered
  by shape-only stand-ins; the tensors they make are fed to the real (tiny, CPU) model, whose forward must take
  them (the width its input layer reads, the mask its attention builds): the check that the shapes are right.
- Nemotron 3.5 Transcribe's audio model: the spectrogram padded to whole encoder frames, as its processor pads.
- FastSpeech 2 inference: simulated, the duration predictor's output taken as the alignment the notes state.
"""

from __future__ import annotations

from typing import Any

import torch

from estimator.peak.inputs.prompts.family import Media


def _run(model_type: str, cls_name: str, config: dict[str, Any], seconds: float) -> dict[str, torch.Tensor]:
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from estimator.peak.inputs.audio.encoders import feed, run_inference
    from estimator.peak.inputs.audio.features import audio_inputs

    hf_config = CONFIG_MAPPING[model_type](**config)
    made = audio_inputs(hf_config, Media(audio_seconds=seconds), batch_size=1, text_len=8)
    torch.manual_seed(0)
    model = getattr(transformers, cls_name)._from_config(hf_config, dtype=torch.float32).eval()
    fed = feed(model, made)
    with torch.no_grad():
        run_inference(model, dict(fed.forward))  # the real forward takes the shapes
    assert " s of audio at 16000 Hz" in made.description
    return fed.forward


_TINY = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2}


def test_granite_speech5_features_fit_the_encoder() -> None:
    fed = _run("granite_speech5_encoder", "GraniteSpeech5Encoder", {**_TINY, "num_key_value_heads": 2, "head_dim": 16}, 1.0)
    # 100 mel frames (hop 160), two stacked per encoder frame, 80 log-mels and their deltas each
    assert tuple(fed["input_features"].shape) == (1, 50, 320)
    assert int(fed["attention_mask"].sum()) == 50


def test_fun_asr_nano_features_fit_the_encoder() -> None:
    fed = _run("fun_asr_nano_encoder", "FunAsrNanoEncoder", {**_TINY, "num_timestamp_prediction_layers": 1}, 1.0)
    # Kaldi: 1 + (16000 - 400) // 160 = 98 frames; low frame rate: 7 stacked every 6 -> 17 frames of 560
    assert tuple(fed["input_features"].shape) == (1, 17, 560)
    assert tuple(fed["input_features_mask"].shape) == (1, 17)


def test_nemotron_transcribe_pads_to_whole_encoder_frames() -> None:
    from transformers import Nemotron3_5TranscribeAudioConfig

    from estimator.peak.inputs.audio.features import audio_inputs

    made = audio_inputs(Nemotron3_5TranscribeAudioConfig(), Media(audio_seconds=1.0), batch_size=1, text_len=8)
    assert tuple(made.tensors["input_features"].shape) == (1, 104, 128)  # 101 frames padded to a multiple of 8
    assert made.tensors["attention_mask"].shape == (1, 104)


def test_fastspeech2_inference_is_simulated_with_its_durations() -> None:
    from transformers import FastSpeech2ConformerConfig

    from estimator.build.transformers_models import build_transformers
    from estimator.peak import simulate_peak

    config = FastSpeech2ConformerConfig(hidden_size=32, encoder_layers=1, decoder_layers=1, encoder_num_attention_heads=2,
                                        decoder_num_attention_heads=2, encoder_linear_units=64, decoder_linear_units=64,
                                        vocab_size=100, num_mel_bins=20, speech_decoder_postnet_layers=2,
                                        speech_decoder_postnet_units=32, duration_predictor_channels=32,
                                        pitch_predictor_channels=32, energy_predictor_channels=32)
    config.architectures = ["FastSpeech2ConformerModel"]
    model = build_transformers(config.to_dict(), torch.float32, model="fastspeech2")
    result = simulate_peak(model, mode="inference", device="cpu", batch_size=1, seq_len=16)
    assert result.method == "simulated"
    assert "4 mel frames per token" in " ".join(result.notes)
