"""Audio-language models simulated with audio in the prompt (estimator/peak/inputs/audio/prompts.py).

- Inputs: the real Qwen2-Audio processor and Whisper feature extractor make the prompt; the clip's
  audio tokens are in ``input_ids`` (as many as the processor's own count for the clip's frames), the
  features are padded to the 30 s window, the words name the seconds of audio.
- Accuracy: the simulated CPU peak of a tiny Qwen2-Audio against the allocator's measured peak of the real
  ``generate`` (4 new tokens) and of two AdamW training steps, each in a fresh process: within 2%.
  The full grid (two clip lengths, both modes, Audio Flamingo 3 too) is ``bench/multimodal_accuracy.py``.
"""

from __future__ import annotations

from typing import Any

import pytest

from estimator.peak.inputs.audio.features import audio_inputs, audio_simulated
from estimator.peak.inputs.prompts.processors import Media
from testkit.audio_cases import AUDIO_CASES
from testkit.multimodal_truth import TruthAndSim

TOLERANCE = 0.02
SAMPLE: list[tuple[str, str, int, float]] = [("qwen2_audio", "inference", 0, 20.0), ("qwen2_audio", "training", 0, 5.0)]


def test_processor_puts_the_clip_in_the_prompt() -> None:
    config = AUDIO_CASES["qwen2_audio"].make_config()
    made = audio_inputs(config, Media(audio_seconds=5.0), batch_size=2, text_len=7)
    ids = made.tensors["input_ids"]
    # 5 s at 16 kHz = 500 mel frames; the encoder's stride-2 conv then its pooling: (500-1)//2+1 = 250 -> 125 tokens
    assert int((ids[0] == config.audio_token_index).sum()) == 125
    assert ids.shape == (2, 125 + 2 + 7)  # audio bos/eos around the clip, then the text words
    assert made.tensors["input_features"].shape == (2, 80, 3000)  # padded to Whisper's 30 s window
    assert int(made.tensors["feature_attention_mask"][0].sum()) == 500
    assert "5 s of audio at 16000 Hz" in made.description and "125 audio tokens + 7 text tokens" in made.description


def test_unknown_types_are_refused() -> None:
    assert audio_simulated("qwen2_audio") and audio_simulated("glmasr") and not audio_simulated("llama")
    with pytest.raises(ValueError, match="not simulated"):
        audio_inputs(AUDIO_CASES["qwen2_audio"].make_config().text_config, Media(audio_seconds=1.0), batch_size=1, text_len=1)


@pytest.mark.parametrize(("case", "mode", "images", "seconds"), SAMPLE)
def test_simulated_peak_matches_allocator(truth_and_sim: TruthAndSim, case: str, mode: str, images: int, seconds: float) -> None:
    truth, sim = truth_and_sim(case, mode, images, seconds)
    assert sim["components"].get("encoder_activations", 0) > 0, sim["components"]
    assert any(truth["inputs"] in note for note in sim["notes"]), (truth["inputs"], sim["notes"])
    error = (sim["peak_bytes"] - truth["peak_bytes"]) / truth["peak_bytes"]
    assert abs(error) <= TOLERANCE, f"{case} {mode}: simulated {sim['peak_bytes']:,} vs measured {truth['peak_bytes']:,} ({error:+.2%})"


def test_estimate_with_audio_seconds(tmp_path: Any) -> None:
    """Through estimate(): a config-only Qwen2-Audio folder, 5 s of audio beside 8 text words."""
    import json

    from estimator import estimate

    (tmp_path / "config.json").write_text(json.dumps(AUDIO_CASES["qwen2_audio"].make_config().to_dict()))
    row = estimate(str(tmp_path), dtypes=["float32"], mode="inference", seq_len=8, audio_seconds=5).row("float32")
    assert row.method == "simulated", row.notes
    assert any("5 s of audio at 16000 Hz per prompt, 125 audio tokens + 8 text tokens" in note for note in row.notes), row.notes
    assert row.components.get("encoder_activations", 0) > 0, row.components
