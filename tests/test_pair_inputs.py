"""Models fed two kinds of input at once (estimator.peak.inputs.vision.pair): the inputs, and the peak against the CPU allocator.

The truth is measured as tests/test_peak_accuracy.py measures it (testkit/pair_truth.py: the real
model built on CPU inside ``torch.profiler``, the same inputs as real tensors, one ``no_grad`` forward,
or two AdamW training steps), each case in a fresh process; the simulation must be within 2%.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from testkit.pair_truth import simulate

ROOT = Path(__file__).resolve().parents[1]
TOLERANCE = 0.02
TRUTH_CASES = ["clip", "layoutlmv3"]  # a dual encoder with its contrastive loss, a box model with its page image
MODES = ["inference", "training"]


@pytest.fixture(scope="module")
def results() -> dict[str, Any]:
    """Both cases measured, each in its own fresh process, while the simulations run here."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    runs = {c: subprocess.Popen([sys.executable, "-m", "testkit.pair_truth", c], cwd=ROOT, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for c in TRUTH_CASES}
    out: dict[str, Any] = {"sim": {(c, m): simulate(c, m) for c in TRUTH_CASES for m in MODES}}
    for case, proc in runs.items():
        stdout, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 0, stderr[-2000:]
        out[case] = json.loads(stdout.strip().splitlines()[-1])
    return out


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", TRUTH_CASES)
def test_peak_matches_cpu_allocator(results: dict[str, Any], case: str, mode: str) -> None:
    measured = results[case][mode]["peak_bytes"]
    sim = results["sim"][(case, mode)]
    assert sim["method"] == "simulated", sim["notes"]
    assert sum(sim["components"].values()) == sim["peak_bytes"]
    error = (sim["peak_bytes"] - measured) / measured
    assert abs(error) <= TOLERANCE, f"{case} {mode}: simulated {sim['peak_bytes']} vs measured {measured} ({error:+.2%})"
    assert "pixel_values" in sim["notes"][0]  # the wording the coverage bench reads: images were fed


def _meta(cls_name: str, config_name: str, **kw: Any) -> torch.nn.Module:
    import transformers

    config = getattr(transformers, config_name)(**kw)
    with torch.device("meta"):
        return getattr(transformers, cls_name)._from_config(config, dtype=torch.float32)


def test_inputs_as_a_user_sends_them() -> None:
    """Shapes from the config: both towers fed, text capped at the text tower's positions, boxes valid."""
    from estimator.peak.inputs.providers import workload_for

    small = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2}
    clip = _meta("CLIPModel", "CLIPConfig", text_config={**small, "max_position_embeddings": 77},
                 vision_config={**small, "image_size": 64, "patch_size": 16})
    wl = workload_for(clip, batch_size=2, seq_len=512)
    x = wl.make_inputs()
    assert x["input_ids"].shape == (2, 77) and x["attention_mask"].shape == (2, 77)  # CLIP's 77 positions
    assert x["pixel_values"].shape == (2, 3, 64, 64)
    assert "return_loss=True" in wl.description and "pixel_values 2x3x64x64" in wl.description

    layout = _meta("LayoutLMv3Model", "LayoutLMv3Config", **small, coordinate_size=4, shape_size=8, input_size=64)
    boxes = workload_for(layout, batch_size=2, seq_len=16).make_inputs()["bbox"]
    assert boxes.shape == (2, 16, 4) and boxes.dtype == torch.long
    assert bool((boxes[..., 2] >= boxes[..., 0]).all()) and bool((boxes[..., 3] >= boxes[..., 1]).all())
    assert int(boxes.min()) >= 0 and int(boxes.max()) < layout.config.max_2d_position_embeddings

    # the image classifier of the same family takes pixels only: left to the generic image path
    classifier = _meta("CLIPForImageClassification", "CLIPConfig", text_config=small, vision_config=small)
    assert "input_ids" not in workload_for(classifier, batch_size=1).make_inputs()
