"""Issue 23's vision inputs and refusals, fast: BatchNorm at batch 1 in training is refused in one line
(the real run fails too); Grounding DINO's prompt carries the ids it splits phrases by."""

from __future__ import annotations

import pytest
import torch

from estimator.errors import BadOptionError


def _levit() -> torch.nn.Module:
    from transformers import LevitConfig, LevitForImageClassification

    config = LevitConfig(image_size=64, hidden_sizes=[32, 48, 64], num_attention_heads=[1, 2, 2], depths=[1, 1, 1],
                         key_dim=[8, 8, 8])
    with torch.device("meta"):
        return LevitForImageClassification(config)


def test_batchnorm_batch_one_training_refused_in_one_line() -> None:
    from estimator.peak import simulate_peak

    with pytest.raises(BadOptionError) as refused:
        simulate_peak(_levit(), mode="training", device="cpu", batch_size=1, extrapolate_layers=False)
    message = str(refused.value)
    assert "BatchNorm1d" in message and "--batch-size 2 or more" in message and "\n" not in message
    assert refused.value.exit_code == 2  # (batch 2 simulated and measured: bench/results/vision_accuracy.md, levit_b2)


def test_grounding_dino_prompt_has_the_ids_it_splits_phrases_by() -> None:
    from estimator.peak.inputs.vision.more_models import _prompt

    ids = _prompt(12, 1024)[0].tolist()
    assert len(ids) == 12 and ids[0] == 101 and ids[-1] == 102 and ids[-2] == 1012  # [CLS] ... "." [SEP]
    assert ids.count(1012) == 4 and max(ids) < 1024
