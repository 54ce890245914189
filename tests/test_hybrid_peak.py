"""Hybrid and SSM decoders: simulated with the model's own cache, against independent truth.

- The simulated peak of ``generate`` (prefill + decode, ``max_new_tokens=8``) and of two AdamW
  training steps against the CPU allocator's peak of the real run, measured as
  ``tests/test_peak_accuracy.py`` measures it (``testkit/hybrid_truth.py``: a fresh process per
  measurement, the model built inside the profiled region), within 2%, for Mamba2, Jamba, Falcon-H1
  and Qwen3-Next at 16 tokens, and the two chunked scans (Mamba2's SSD, Qwen3-Next's gated delta rule)
  at 48 too. ``bench/hybrid_accuracy.py`` runs every case, and the other families too
  (Mamba, Bamba, GraniteMoeHybrid, LFM2; bench/results/hybrid_accuracy.md).
- The conv, recurrent (SSM) and KV bytes the simulation labels equal those of the cache a real CPU
  forward fills (``transformers``' own ``DynamicCache`` with ``LinearAttentionLayer``s).
- A config.json written by transformers with ``time_step_limit: [0.0, {"__float__": "Infinity"}]``
  (Mamba2, Falcon-H1) is read as transformers reads it, and answered by simulation.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from testkit.hybrid_truth import CI_FAMILIES, HYBRID_CASES, run_all

MODES = ["inference", "training"]
TOLERANCE = 0.02
CI_CASES = [name for name in HYBRID_CASES if name.rsplit("_", 1)[0] in CI_FAMILIES
            and (name.endswith("_16") or name in ("mamba2_48", "qwen3_next_48"))]


@pytest.fixture(scope="module")
def results() -> dict[tuple[str, str, str], Any]:
    return run_all(CI_CASES, MODES)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", CI_CASES)
def test_hybrid_peak_within_2_percent_of_the_allocator(results: dict[tuple[str, str, str], Any], case: str,
                                                        mode: str) -> None:
    truth, sim = results[("truth", case, mode)], results[("sim", case, mode)]
    assert isinstance(truth, int), f"ground truth failed: {truth}"
    assert isinstance(sim, dict), f"simulation failed: {sim}"
    assert sim["method"] == "simulated", sim["notes"]
    assert sum(sim["components"].values()) == sim["peak_bytes"]
    if mode == "inference":
        assert any("last decode step at context" in n for n in sim["notes"]), sim["notes"]
    error = (sim["peak_bytes"] - truth) / truth
    assert abs(error) <= TOLERANCE, f"{case} {mode}: simulated {sim['peak_bytes']:,} vs measured {truth:,} ({error:+.2%})"


def _real_cache_bytes(case: str, tokens: int) -> dict[str, int]:
    """conv_state / ssm_state / kv_cache bytes of the cache a real CPU forward over ``tokens`` tokens fills."""
    from transformers import DynamicCache

    from estimator.peak.sim.caches import cache_argument, returned_cache, state_tensors, tensors_in

    c = HYBRID_CASES[case]
    model = c.build_on("cpu").eval()
    with torch.no_grad():
        out = model(input_ids=torch.zeros(c.batch_size, tokens, dtype=torch.long), use_cache=True,
                    **{cache_argument(model): DynamicCache(config=model.config)})
    cache = returned_cache(out)
    conv, ssm = state_tensors(cache)
    states = {id(t) for t in (*conv, *ssm)}
    kv = [t for t in tensors_in(cache) if id(t) not in states]
    found = {"conv_state": sum(t.nbytes for t in conv), "ssm_state": sum(t.nbytes for t in ssm),
             "kv_cache": sum(t.nbytes for t in kv)}
    return {k: v for k, v in found.items() if v}


@pytest.mark.parametrize("case", ["falcon_h1_16", "qwen3_next_16", "mamba_16", "lfm2_16"])
def test_state_components_are_the_real_caches_bytes(case: str) -> None:
    """What the last decode step leaves (the cache of the whole context) is labelled per kind and
    equals, kind by kind, the bytes of the cache a real forward over that context fills."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from estimator.peak.inputs.providers import workload_for
    from estimator.peak.sim.materialize import materialize
    from estimator.peak.sim.steps import AFTER, simulate_step

    c = HYBRID_CASES[case]
    model = c.build_on("meta")
    fake_mode = FakeTensorMode(static_shapes=True)
    materialize(model, fake_mode)
    workload = workload_for(model, batch_size=c.batch_size, seq_len=c.seq_len)
    step = simulate_step(model, workload, fake_mode, mode="inference", device="cpu", max_new_tokens=c.max_new_tokens)
    after = step.phases[AFTER + "decode"].components
    simulated = {k: after[k] for k in ("conv_state", "ssm_state", "kv_cache") if after.get(k)}
    assert simulated == _real_cache_bytes(case, c.seq_len + c.max_new_tokens)
    assert "conv_state" in simulated


@pytest.mark.parametrize("case", ["falcon_h1_16", "mamba2_16"])
def test_encoded_infinity_in_config_json_is_read_as_transformers_reads_it(case: str, tmp_path: Path) -> None:
    import transformers

    from estimator import estimate

    c = HYBRID_CASES[case]
    config = transformers.AutoConfig.for_model(c.model_type, **c.overrides)
    config.architectures = [type(c.build_on("meta")).__name__]
    config.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["time_step_limit"][1] == {"__float__": "Infinity"}
    result = estimate(str(tmp_path), mode="inference", dtypes="float32", device="cpu", batch_size=1, seq_len=16,
                      max_new_tokens=4)
    (row,) = result.rows
    assert row.method == "simulated", row.notes
    assert row.components["ssm_state"] > 0 and row.components["conv_state"] > 0
    assert any("layers' state (fixed per sequence): conv_state" in n for n in row.notes), row.notes


def test_serving_plans_the_state_layers(tmp_path: Path) -> None:
    """``--mode serving`` counts the recurrent state beside the KV cache (tests/test_serving_states.py checks the rule)."""
    import transformers

    from estimator import estimate

    c = HYBRID_CASES["falcon_h1_16"]
    config = transformers.AutoConfig.for_model(c.model_type, **c.overrides)
    config.architectures = ["FalconH1ForCausalLM"]
    config.save_pretrained(tmp_path)
    (row,) = estimate(str(tmp_path), mode="serving", dtypes="bfloat16", gpu="H100-80GB", max_model_len=4096).rows
    assert row.peak_bytes is not None and row.serving is not None, row.notes
    assert row.serving["state_layers"] == 2 and row.serving["state_bytes_per_request"] > 0
    assert any(n.startswith("recurrent state: 2 layer(s)") for n in row.notes), row.notes
