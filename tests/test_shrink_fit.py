"""The coverage bench's small configs keep the size relations their real forward needs (testkit/shrink_fit.py).

Each type here had a small config whose real forward on the CPU failed (BROS: ``dim_bbox_projection``
64 against a head size of 16; LayoutLMv3: ``4 * coordinate_size + 2 * shape_size`` = 768 against a
hidden size of 64; Vision-Text-Dual-Encoder: a vision ``pooler_output_size`` of 768; Sapiens2: 16
key/value heads per layer against 4 heads). Here each small config is built for real and run forward
with the inputs the estimator feeds it (its processor's shapes, 32 text tokens).
"""

from __future__ import annotations

import pytest
import torch

TYPES = ["bros", "layoutlmv3", "vision-text-dual-encoder", "sapiens2"]


@pytest.mark.parametrize("model_type", TYPES)
def test_small_config_runs_forward_for_real(model_type: str) -> None:
    from estimator.peak.inputs.providers import workload_for
    from testkit.coverage import small_config

    small, _name, model, level, reason = small_config(model_type)
    assert small is not None and level == 1, reason
    wl = workload_for(model, seq_len=32)
    with torch.no_grad():
        out = wl.infer(model.eval(), wl.make_inputs())
    assert out is not None
    if model_type == "layoutlmv3":
        assert 4 * small["coordinate_size"] + 2 * small["shape_size"] == small["hidden_size"]
    if model_type == "bros":
        assert small["dim_bbox_projection"] == small["hidden_size"] // small["num_attention_heads"]
