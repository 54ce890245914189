"""The processor families of estimator/peak/inputs/prompts/more_families.py: GLM-4V's simulated peak against the CPU allocator.

A tiny GLM-4V (``testkit/multimodal_cases.py``) fed what ``Glm4vProcessor`` makes of two random images: two
AdamW training steps, simulated and measured each in a fresh process
(``testkit.multimodal_truth``); the full grid (1 and 2 images, both modes) is ``bench/multimodal_accuracy.py glm4v``.
"""

from __future__ import annotations

import pytest

from testkit.multimodal_truth import TruthAndSim

TOLERANCE = 0.02
SAMPLE = [("glm4v", "training", 2, 0.0)]


@pytest.mark.parametrize(("case", "mode", "images", "seconds"), SAMPLE)
def test_glm4v_peak_matches_allocator(truth_and_sim: TruthAndSim, case: str, mode: str, images: int, seconds: float) -> None:
    truth, sim = truth_and_sim(case, mode, images, seconds)
    assert "pixel_values" in sim["notes"][0], sim["notes"][0]  # the step was fed the processor's images
    assert sim["components"].get("encoder_activations", 0) > 0  # the vision tower ran
    error = (sim["peak_bytes"] - truth["peak_bytes"]) / truth["peak_bytes"]
    assert abs(error) <= TOLERANCE, f"{case} {mode}: simulated {sim['peak_bytes']:,} vs measured {truth['peak_bytes']:,} ({error:+.2%})"


def test_more_families_are_looked_up() -> None:
    """Every model type of the table is found by the processor lookup, so ``--images`` is accepted for it."""
    from estimator.peak.inputs.prompts.more_families import more_families
    from estimator.peak.inputs.prompts.processors import images_simulated

    types = more_families()
    assert {"glm4v", "blip-2", "florence2", "pix2struct", "vision-encoder-decoder"} <= set(types)
    assert all(images_simulated(t) for t in types)


def test_one_image_models_refuse_two() -> None:
    """A captioner that takes one image per prompt says so in one line (the step then runs on text, with a note)."""
    from transformers import AutoConfig

    from estimator.errors import EstimatorError
    from estimator.peak.inputs.prompts.processors import Media, media_inputs

    config = AutoConfig.for_model("blip-2", num_query_tokens=4, image_token_index=50265)
    with pytest.raises(EstimatorError, match="one image per prompt"):
        media_inputs(config, Media(images=2, image_size=32), batch_size=1, text_len=4)
    with pytest.raises(EstimatorError, match="no image_token_index"):  # the forward could not place the image tokens
        media_inputs(AutoConfig.for_model("blip-2"), Media(images=1, image_size=32), batch_size=1, text_len=4)
    made = media_inputs(config, Media(images=1, image_size=32), batch_size=1, text_len=4)
    assert made.image_tokens == 4 and made.tensors["input_ids"].shape[1] == 8
    assert "pixel_values 1x3x" in made.description
