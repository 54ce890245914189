"""Vision models fed their image processor's inputs (estimator.peak.inputs.vision.models): simulated peak vs the CPU allocator.

A DETR (128 px, ``pixel_values`` + ``pixel_mask`` from ``DetrImageProcessor``) and a vision tower asked
alone (Idefics3's, fed its processor's tiles as one batch of ``pixel_values``) are built for real on CPU and measured with ``torch.profiler`` as tests/test_peak_accuracy.py measures
(testkit/vision_truth.py: two AdamW steps for training, one ``no_grad`` forward for inference), each in a
fresh process (about 25 s on an idle 2-core machine). More cases, towers of the coverage bench among them:
``python -m testkit.vision_truth``. The simulation must be within 2%, by simulation (not the formula), its notes naming ``pixel_values``.
"""

from __future__ import annotations

from typing import Any

import pytest

from testkit.vision_truth import run_jobs

CASES = ["detr", "idefics3_tower"]
MODES = ["inference", "training"]
TOLERANCE = 0.02


@pytest.fixture(scope="module")
def results() -> dict[tuple[str, str, str], Any]:
    return run_jobs([(kind, case, mode) for case in CASES for mode in MODES for kind in ("truth", "sim")])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", CASES)
def test_vision_peak_matches_allocator(results: dict[tuple[str, str, str], Any], case: str, mode: str) -> None:
    truth, sim = results[("truth", case, mode)], results[("sim", case, mode)]
    assert isinstance(truth, int), f"ground truth failed: {truth}"
    assert isinstance(sim, dict), f"simulation failed: {sim}"
    assert sim["method"] == "simulated", sim["notes"]
    assert any("pixel_values" in note for note in sim["notes"]), sim["notes"]
    assert sum(sim["components"].values()) == sim["peak_bytes"]
    error = (sim["peak_bytes"] - truth) / truth
    assert abs(error) <= TOLERANCE, f"{case} {mode}: simulated {sim['peak_bytes']:,} vs measured {truth:,} ({error:+.2%})"


def test_detr_inputs_are_its_processors() -> None:
    """DETR's inputs are DetrImageProcessor's: pixel_values at its resolution (800 px for a square image) and pixel_mask."""
    import torch

    from estimator.peak.inputs.providers import workload_for
    from testkit.vision_truth import CASES as TRUTH_CASES

    with torch.device("meta"):
        model = TRUTH_CASES["detr"].make()
    wl = workload_for(model, batch_size=2)
    assert "pixel_values 2x3x800x800" in wl.description and "pixel_mask 2x800x800" in wl.description, wl.description
