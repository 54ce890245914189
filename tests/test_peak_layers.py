"""Layer extrapolation equals the full simulation (within 0.5%) on real configs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from estimator.peak import simulate_peak
from estimator.peak.sim.layers import layer_count

# Copies of public config.json files (from ../shared/hub-fixtures, see its README).
MODELS = Path(__file__).parent / "hub_data" / "models"  # published configs (copies of ../shared/hub-fixtures)


def _config_path(repo: str) -> Path:
    return MODELS / repo / "config.json"


def _build(repo: str, dtype: torch.dtype) -> torch.nn.Module:
    import transformers

    config = transformers.AutoConfig.for_model(**json.loads(_config_path(repo).read_text()))
    with torch.device("meta"):
        return transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)


@pytest.mark.parametrize(
    ("repo", "mode", "device", "dtype", "seq_len"),
    [
        ("meta-llama/Llama-3.1-8B", "training", "cuda", torch.float32, 256),
        # CPU target: with 2 layers the optimizer step peaks, from 3 layers on the backward does;
        # per-phase extrapolation must still give the full simulation's answer
        ("meta-llama/Llama-3.1-8B", "training", "cpu", torch.float32, 4096),
        ("meta-llama/Llama-3.2-3B", "inference", "cpu", torch.bfloat16, 512),
    ],
)
def test_extrapolated_equals_full(repo: str, mode: str, device: str, dtype: torch.dtype,
                                  seq_len: int) -> None:
    kw = {"mode": mode, "device": device, "batch_size": 1, "seq_len": seq_len}
    fast = simulate_peak(_build(repo, dtype), extrapolate_layers=True, **kw)  # type: ignore[arg-type]
    full = simulate_peak(_build(repo, dtype), extrapolate_layers=False, **kw)  # type: ignore[arg-type]
    assert any("extrapolated" in n for n in fast.notes)
    assert not any("extrapolated" in n for n in full.notes)
    assert fast.method == full.method == "simulated"
    assert abs(fast.peak_bytes - full.peak_bytes) <= 0.005 * full.peak_bytes
    assert sum(fast.components.values()) == fast.peak_bytes
    for key, value in full.components.items():
        assert abs(fast.components.get(key, 0) - value) <= 0.005 * full.peak_bytes, key


def test_unlike_layers_are_not_extrapolated() -> None:
    import transformers

    config = transformers.Qwen2Config(num_hidden_layers=8, use_sliding_window=True, sliding_window=16,
                                      max_window_layers=4, hidden_size=64, intermediate_size=128,
                                      num_attention_heads=4, num_key_value_heads=2, vocab_size=1000)
    with torch.device("meta"):
        model = transformers.Qwen2ForCausalLM._from_config(config)
    assert layer_count(model) is None
