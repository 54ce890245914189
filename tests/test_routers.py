"""Fast checks of the routing assumption, the known constants and the time-series inputs (the truth against
the CPU allocator is ``python -m bench.router_accuracy``, results in bench/results/router_accuracy.md)."""

from __future__ import annotations

import pytest
import torch
import transformers
from torch._subclasses.fake_tensor import FakeTensorMode

from estimator.peak.fakes.known_constants import KnownConstants
from estimator.peak.fakes.known_values import KnownValues, known_value, know
from estimator.peak.inputs.other.series import series_arrays
from estimator.peak.inputs.routing import ROUTING_NOTE, routes_by_values


def _meta(config: transformers.PretrainedConfig, cls: type) -> torch.nn.Module:
    with torch.device("meta"):
        return cls._from_config(config, dtype=torch.float32)  # type: ignore[attr-defined]


def _small(model_type: str, **kw: object) -> transformers.PretrainedConfig:
    return transformers.AutoConfig.for_model(model_type, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                             num_attention_heads=2, num_key_value_heads=2, vocab_size=128, **kw)


def test_routers_that_ask_their_values_are_found() -> None:
    jetmoe = _meta(_small("jetmoe", num_local_experts=4, num_experts_per_tok=2, kv_channels=16), transformers.JetMoeForCausalLM)
    mixtral = _meta(_small("mixtral", num_local_experts=4, num_experts_per_tok=2), transformers.MixtralForCausalLM)
    llama = _meta(_small("llama"), transformers.LlamaForCausalLM)
    assert routes_by_values(jetmoe)  # expert_size.tolist()
    assert not routes_by_values(mixtral)  # grouped_mm: shapes do not depend on the routing
    assert not routes_by_values(llama)
    tower = _meta(transformers.Qwen3VLMoeVisionConfig(depth=1, hidden_size=32, intermediate_size=64, num_heads=2,
                                                      out_hidden_size=32), transformers.Qwen3VLMoeVisionModel)
    assert not routes_by_values(tower)  # its attention asks cu_seqlens.tolist(): not a router


def test_jetmoe_step_is_simulated_with_the_assumption_stated() -> None:
    from estimator.peak import simulate_peak

    model = _meta(_small("jetmoe", num_local_experts=4, num_experts_per_tok=2, kv_channels=16), transformers.JetMoeForCausalLM)
    result = simulate_peak(model, mode="inference", device="cpu", seq_len=16, extrapolate_layers=False)
    assert result.method == "simulated"
    assert any(ROUTING_NOTE in note for note in result.notes)


def test_known_parts_of_a_concatenation() -> None:
    ones = torch.ones(2, 5)
    with FakeTensorMode(), KnownValues(), KnownConstants():
        mask = know(torch.empty(2, 5), ones)
        packed = torch.cat([torch.randn(2, 5, 3), mask[..., None]], dim=-1)
        _keys, valid = torch.split(packed, [3, 1], dim=-1)
        last = packed[..., -1]
        zeros = torch.zeros(4)
        known = [known_value(valid), known_value(last), known_value(zeros)]
        whole = known_value(packed)
    assert all(k is not None for k in known) and whole is None
    assert torch.equal(known[0], torch.ones(2, 5, 1)) and torch.equal(known[1], ones)  # type: ignore[arg-type]
    assert torch.equal(known[2], torch.zeros(4))  # type: ignore[arg-type]


@pytest.mark.parametrize("input_size", [1, 3])
def test_series_batch_is_shaped_by_the_config(input_size: int) -> None:
    config = transformers.TimeSeriesTransformerConfig(prediction_length=12, context_length=20, lags_sequence=[1, 2, 7],
                                                      num_time_features=2, num_dynamic_real_features=1,
                                                      num_static_categorical_features=1, cardinality=[5],
                                                      embedding_dimension=[2], input_size=input_size)
    arrays, description = series_arrays(config, 2)
    values = (2, 27) if input_size == 1 else (2, 27, input_size)
    assert arrays["past_values"].shape == values and arrays["past_observed_mask"].shape == values
    assert arrays["past_time_features"].shape == (2, 27, 3)
    assert arrays["future_time_features"].shape == (2, 12, 3)
    assert arrays["static_categorical_features"].shape == (2, 1)
    assert "context_length 20 + the largest lag" in description
