"""Vision-language and speech models simulated with their real inputs (docs/multimodal.md).

- Accuracy: the simulated CPU peak of tiny models of each family, fed what their transformers processor
  makes of random images (or audio), against the allocator's measured peak of the real run in a fresh
  process (``generate`` with 4 new tokens; two AdamW steps with labels over text and image tokens):
  within 2%. The full grid (every family at 1 and 2 images, both modes; two audio lengths) is
  ``bench/multimodal_accuracy.py`` and ``bench/results/multimodal_accuracy.md``; CI runs a sample.
- Through the Hub stand-in: a tiny LLaVA repo with its preprocessor_config.json and
  processor_config.json, the options on the result and in the notes, and the refusals.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from estimator.errors import BadOptionError
from estimator.options import parse_options
from testkit.hub_process import REPO_ROOT, hub_env
from testkit.multimodal_truth import TruthAndSim

TOLERANCE = 0.02
# (case, mode, images, audio seconds): every vision-language family at 2 images in generate, one training
# step, and both speech models (the full grid: bench/multimodal_accuracy.py).
SAMPLE: list[tuple[str, str, int, float]] = [
    *((case, "inference", 2, 0.0) for case in ("llava", "gemma3", "qwen2_5_vl", "idefics3", "paligemma", "mllama")),
    ("qwen2_5_vl", "training", 1, 0.0), ("whisper", "inference", 0, 30.0), ("speech_to_text", "training", 0, 12.0),
    ("llava_next", "inference", 2, 0.0),  # anyres tiles (image_families.py); InternVL, Mistral3: the bench only
]


@pytest.mark.parametrize(("case", "mode", "images", "seconds"), SAMPLE)
def test_simulated_peak_matches_allocator(truth_and_sim: TruthAndSim, case: str, mode: str, images: int, seconds: float) -> None:
    truth, sim = truth_and_sim(case, mode, images, seconds)
    assert sum(sim["components"].values()) == sim["peak_bytes"]
    assert sim["components"].get("encoder_activations", 0) > 0 or mode == "training", sim["components"]
    # the simulation was fed the inputs the truth was: the processor's description is in its notes
    assert any(truth["inputs"] in note for note in sim["notes"]), (truth["inputs"], sim["notes"])
    error = (sim["peak_bytes"] - truth["peak_bytes"]) / truth["peak_bytes"]
    assert abs(error) <= TOLERANCE, f"{case} {mode}: simulated {sim['peak_bytes']:,} vs measured {truth['peak_bytes']:,} ({error:+.2%})"


def test_options_are_parsed_and_reported() -> None:
    options = parse_options(mode="inference", images=2, audio_seconds="12.5")
    assert (options.work.shape.images, options.work.shape.audio_seconds) == (2, 12.5)
    shaped = options.shaping(None)
    assert shaped["images"] == 2 and shaped["audio_seconds"] == 12.5
    assert "images" not in parse_options(mode="inference").shaping(None)
    with pytest.raises(BadOptionError, match="images"):
        parse_options(mode="inference", images=-1)
    with pytest.raises(BadOptionError, match="audio-seconds must be a number of seconds above 0"):
        parse_options(mode="inference", audio_seconds="long")
    with pytest.raises(BadOptionError, match="audio-seconds must be a number of seconds above 0"):
        parse_options(mode="inference", audio_seconds=0)


def _drive(url: str, cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    result = subprocess.run([sys.executable, "-m", "tests._drive_estimator"], input=json.dumps(cases), capture_output=True,
                            text=True, cwd=REPO_ROOT, env=hub_env(url), timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


def test_hub_vlm_with_its_processor_files(hub_server: str) -> None:
    common = {"mode": "inference", "device": "cpu", "dtypes": ["float32"], "seq_len": 32, "max_new_tokens": 4}
    two, default, not_vlm, video = _drive(hub_server, [
        {"model": "estimator-test/tiny-llava", "kwargs": {**common, "images": 2}},
        {"model": "estimator-test/tiny-llava", "kwargs": common},
        {"model": "estimator-test/tiny-llama", "kwargs": {**common, "images": 2}},
        {"model": "estimator-test/tiny-llava", "kwargs": {**common, "video_frames": 8}},
    ])
    row = two["ok"]["rows"][0]
    notes = " ".join(row["notes"])
    # 32 px CLIP images with 8 px patches: 16 tokens each (the CLS token dropped by the "default" strategy)
    assert "2 images of 32x32 px per prompt, 32 image tokens + 32 text tokens (LlavaProcessor" in notes, notes
    assert "last decode step at context 68" in notes  # 32 image + 32 text tokens + 4 new
    assert row["components"]["encoder_activations"] > 0
    assert two["ok"]["options"]["images"] == 2
    assert "1 image of 32x32 px per prompt, 16 image tokens" in " ".join(default["ok"]["rows"][0]["notes"])
    assert row["peak_bytes"] > default["ok"]["rows"][0]["peak_bytes"]
    assert not_vlm["error"] == "UnsupportedError" and "--images" in not_vlm["message"] and "llama" in not_vlm["message"]
    assert video["error"] == "UnsupportedError" and "--video-frames" in video["message"]


def test_inputs_the_model_refuses_fall_back_to_text_with_a_note() -> None:
    """Processor settings that disagree with the model (5 image tokens for 4 features): the model's own
    check fails on the known values, as the real run would, and the row is the text-only step, never a formula."""
    from estimator.peak import simulate_peak
    from estimator.peak.inputs.prompts.processors import Media
    from testkit.multimodal_cases import MM_CASES

    case = MM_CASES["gemma3"]
    wrong = simulate_peak(case.build_on("meta"), mode="inference", device="cpu", seq_len=32,
                          media=Media(images=1, processor={"image_seq_length": 5}))
    assert wrong.method == "simulated"
    assert wrong.notes[0].startswith("images or audio not simulated") and "Image features and image tokens do not match" in wrong.notes[0]
    right = simulate_peak(case.build_on("meta"), mode="inference", device="cpu", seq_len=32, media=Media(images=1))
    assert "1 image of 32x32 px per prompt, 4 image tokens + 32 text tokens (Gemma3Processor" in right.notes[0]
    assert right.peak_bytes > wrong.peak_bytes
