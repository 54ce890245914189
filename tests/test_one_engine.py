"""One engine, one answer: the Hub path and the ``nn.Module`` path give the same peak.

``estimator.estimate`` (a config folder, the model built on meta by the library) and
``estimate_module`` (any module, inputs from sizes, a loss function) both run
:func:`estimator.peak.engine.simulate_step`, with the same CPU workspace model. For a timm ResNet-18
with the same input and the same loss (cross-entropy against class labels, the Hub workload's)
their peaks must be equal to the byte, training and inference, CPU and CUDA. For a module no
config describes (pytorch_modelsize's README model), ``estimate_module`` must be exactly the engine
called directly, and the engine's CPU peak within 2% of the allocator's measured peak (the truth
of ``tests/test_module_ground_truth.py``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

import estimator
from estimator.modules.estimate import estimate_module, meta_copy
from estimator.peak.engine import simulate_step
from estimator.peak.inputs.generic import module_workload
from estimator.peak.sim.materialize import materialize
from tests.test_module_ground_truth import CASES, measured_peak

BATCH, IMAGE = 2, 32
RESNET = {"architecture": "resnet18", "num_classes": 10, "pretrained_cfg": {"input_size": [3, 224, 224]}}


def class_loss(logits: torch.Tensor) -> torch.Tensor:
    """The Hub workload's timm loss: cross-entropy against class labels drawn after the forward."""
    return F.cross_entropy(logits, torch.zeros(logits.shape[0], dtype=torch.long))


@pytest.fixture(scope="module")
def resnet_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("timm_resnet18")
    (folder / "config.json").write_text(json.dumps(RESNET))
    return folder


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("mode", ["training", "inference"])
def test_hub_path_and_module_path_agree_on_a_timm_resnet(resnet_folder: Path, mode: str, device: str) -> None:
    import timm

    hub = estimator.estimate(
        str(resnet_folder), mode=mode, device=device, batch_size=BATCH, image_size=IMAGE, dtypes=["float32"]
    ).row("float32")
    with torch.device("meta"):
        model = timm.create_model("resnet18", num_classes=10)
    module = estimate_module(
        model, (BATCH, 3, IMAGE, IMAGE), mode=mode, device=device, loss_fn=class_loss
    ).row("float32")
    assert hub.method == module.method == "simulated"
    assert hub.peak_bytes is not None and hub.peak_bytes == module.peak_bytes
    assert hub.components == module.components


def _engine_peak(mode: str) -> int:
    cls, size = CASES["readme"]
    model = meta_copy(cls())
    fake_mode = FakeTensorMode(static_shapes=True)
    try:
        materialize(model, fake_mode)
        step = simulate_step(
            model, module_workload((size,), torch.float32), fake_mode, mode=mode, device="cpu",  # type: ignore[arg-type]
            full_first_step=True,
        )
    finally:
        FakeTensorMode.cache_clear()
    assert sum(step.peak.components.values()) == step.peak.peak_bytes
    return step.peak.peak_bytes


@pytest.mark.parametrize("mode", ["training", "inference"])
def test_estimate_module_is_the_engine_on_the_readme_model(mode: str) -> None:
    cls, size = CASES["readme"]
    row = estimate_module(cls(), size, mode=mode, device="cpu").row("float32")
    assert row.peak_bytes == _engine_peak(mode)


def test_the_engine_is_within_2_percent_of_the_cpu_allocator_on_the_readme_model() -> None:
    engine, truth = _engine_peak("training"), measured_peak("readme", "training")
    assert abs(engine - truth) / truth < 0.02, (engine, truth)
