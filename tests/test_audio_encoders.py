"""Speech encoders, CTC and audio-classification models fed their own feature extractor's audio
(estimator/peak/inputs/audio/encoders.py).

- Accuracy: tiny ParakeetForCTC and ASTForAudioClassification, fed what their transformers feature
  extractor makes of random audio, against the allocator's measured peak of the real run in a fresh
  process (one forward under no_grad; two AdamW steps with the model's own CTC / classification loss):
  within 2%. The full grid (Wav2Vec2ForCTC too, two audio lengths, both modes) is
  ``bench/multimodal_accuracy.py``.
- The route: which types are fed audio, and ``--audio-seconds`` shaping what the extractor makes.
"""

from __future__ import annotations

import pytest

from testkit.multimodal_truth import TruthAndSim

TOLERANCE = 0.02
SAMPLE: list[tuple[str, str, int, float]] = [("parakeet_ctc", "training", 0, 4.0), ("ast", "training", 0, 1.0)]


@pytest.mark.parametrize(("case", "mode", "images", "seconds"), SAMPLE)
def test_simulated_peak_matches_allocator(truth_and_sim: TruthAndSim, case: str, mode: str, images: int, seconds: float) -> None:
    truth, sim = truth_and_sim(case, mode, images, seconds)
    assert any(truth["inputs"] in note and "input_" in note for note in sim["notes"]), (truth["inputs"], sim["notes"])
    error = (sim["peak_bytes"] - truth["peak_bytes"]) / truth["peak_bytes"]
    assert abs(error) <= TOLERANCE, f"{case} {mode}: simulated {sim['peak_bytes']:,} vs measured {truth['peak_bytes']:,} ({error:+.2%})"


def test_audio_seconds_shape_the_extractor_output() -> None:
    from transformers import AutoConfig

    from estimator.peak.inputs.audio.features import audio_inputs, audio_simulated
    from estimator.peak.inputs.prompts.processors import Media

    assert audio_simulated("wav2vec2") and audio_simulated("parakeet_encoder") and audio_simulated("qwen2_audio_encoder")
    assert not audio_simulated("bert")
    config = AutoConfig.for_model("wav2vec2")
    short, long = (audio_inputs(config, Media(audio_seconds=s), batch_size=2, text_len=8) for s in (1.0, 3.0))
    assert short.tensors["input_values"].shape == (2, 16000) and long.tensors["input_values"].shape == (2, 48000)
    assert long.description.startswith("3 s of audio at 16000 Hz per sample (Wav2Vec2FeatureExtractor)")
    # a sub-model type gets its parent's extractor, with the mel bins its config declares
    encoder = audio_inputs(AutoConfig.for_model("qwen2_audio_encoder", num_mel_bins=80), Media(audio_seconds=5.0),
                           batch_size=1, text_len=8)
    assert encoder.tensors["input_features"].shape == (1, 80, 3000)  # Whisper's extractor pads to its 30 s window
