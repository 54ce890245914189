"""bitsandbytes int8 / int4 models: the simulated CPU peak against the allocator's real peak of the same run.

Each truth is a real run in a fresh process (``testkit/quant_truth.py``): a tiny model saved, then loaded inside
``torch.profiler`` with ``from_pretrained(quantization_config=BitsAndBytesConfig(load_in_4bit / load_in_8bit))``
(real quantization on CPU), then ``generate`` (prefill and 32 new tokens) or two int8 + LoRA training steps as
``peft.prepare_model_for_kbit_training`` leaves the model; the maximum "Total Allocated" of the work's window.
The simulation (``simulate_peak`` with a ``kbit`` recipe, :mod:`estimator.peak.sim.quantized`) must be
within 2%. ``python -m bench.quant_accuracy`` runs the wider grid (``bench/results/quant_accuracy.md``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from testkit.hub_process import REPO_ROOT
from testkit.peak_pool import run_truth_jobs

TOLERANCE = 0.02
# kind -> the architectures it is checked on in CI (the bench runs every one of testkit.quant_truth.QUANT_CASES:
# bench/results/quant_accuracy.md).
GRID: dict[str, tuple[str, ...]] = {
    "int4_generate": ("llama_gqa", "gpt2", "phi3", "mistral_swa"),  # mistral_swa: its peak in bfloat16 SDPA
    "int8_generate": ("mistral_swa", "gemma_mqa", "opt"),
    "int8_lora": ("qwen2_swa",),
}
PAIRS = [(kind, case) for kind, cases in GRID.items() for case in cases]


@pytest.fixture(scope="module")
def results() -> dict[tuple[str, str, str], Any]:
    return run_truth_jobs("testkit.quant_truth", [(side, case, kind) for kind, case in PAIRS for side in ("truth", "sim")],
                          processes=2)


@pytest.mark.parametrize(("kind", "case"), PAIRS, ids=[f"{k}-{c}" for k, c in PAIRS])
def test_quantized_peak_matches_the_allocator(results: dict[tuple[str, str, str], Any], kind: str, case: str) -> None:
    truth, sim = results[("truth", case, kind)], results[("sim", case, kind)]
    assert isinstance(truth, dict), f"ground truth failed: {truth}"
    assert isinstance(sim, dict), f"simulation failed: {sim}"
    assert sim["method"] == "simulated", sim["notes"]
    assert sum(sim["components"].values()) == sim["peak_bytes"]
    error = (sim["peak_bytes"] - truth["peak_bytes"]) / truth["peak_bytes"]
    assert abs(error) <= TOLERANCE, f"{case} {kind}: simulated {sim['peak_bytes']:,} vs measured {truth['peak_bytes']:,} ({error:+.2%})"


def test_cli_int_rows_are_simulated(results: dict[tuple[str, str, str], Any], tmp_path: Path) -> None:
    """The CLI's int4 row (``--mode inference``) is the simulation the truth above checks, with the scheme named;
    its int8 row is simulated too."""
    config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "num_key_value_heads": 2, "hidden_size": 64,
              "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 1000,
              "max_position_embeddings": 256}
    (tmp_path / "config.json").write_text(json.dumps(config))
    done = subprocess.run([sys.executable, "-m", "estimator", str(tmp_path), "--mode", "inference", "--device", "cpu",
                           "--dtypes", "int4", "int8", "--bnb-compute-dtype", "bfloat16", "--batch-size", "2", "--seq-len", "64",
                           "--max-new-tokens", "32", "--format", "json"], capture_output=True, text=True, cwd=REPO_ROOT, timeout=600)
    assert done.returncode == 0, done.stderr
    int4, int8 = json.loads(done.stdout)["rows"]
    measured = results[("truth", "llama_gqa", "int4_generate")]["peak_bytes"]
    assert int4["method"] == "simulated" and abs(int4["peak_bytes"] - measured) / measured <= TOLERANCE, (int4["peak_bytes"], measured)
    assert any("bitsandbytes 4-bit" in n for n in int4["notes"])
    assert int8["method"] == "simulated" and int8["peak_bytes"] > int4["peak_bytes"]
    assert any("LLM.int8()" in n and "no outlier column assumed" in n for n in int8["notes"])


def test_prequantized_float_row_says_how_its_weights_are_held(monkeypatch: pytest.MonkeyPatch) -> None:
    """A float row of an FP8 checkpoint counts its float8 tensors as stored: the row's ``weights_held`` and the CLI
    table say so (the dtype alone would read as an unquantized model)."""
    from types import SimpleNamespace

    from estimator.load import rows
    from estimator.options import DType, Library, LoadSpec
    from estimator.report import to_table
    from estimator.result import Estimate
    from estimator.source.reference import ModelRef
    from estimator.source.resolve import Resolved

    tensors = {"model.layers.0.mlp.up_proj.weight": ("F8_E4M3", [256, 128]), "model.layers.0.mlp.up_proj.weight_scale_inv": ("F32", [2, 1]),
               "model.embed_tokens.weight": ("BF16", [100, 128])}
    header = SimpleNamespace(tensors={k: SimpleNamespace(dtype=d, shape=s) for k, (d, s) in tensors.items()})
    metadata = SimpleNamespace(files_metadata={"model.safetensors": header}, metadata={})
    monkeypatch.setattr(rows.hub, "safetensors_metadata", lambda *a, **k: metadata)
    config = {"model_type": "llama", "torch_dtype": "bfloat16", "quantization_config": {"quant_method": "fp8"}}
    resolved = Resolved(ref=ModelRef(repo_id="someone/fp8"), source="hub", library=Library.TRANSFORMERS, config=config,
                        files=("model.safetensors",))
    found = rows.stored_rows(resolved, LoadSpec(dtypes=(DType.BFLOAT16,)), token=None, timeout=5.0, cross_check=False)
    assert found is not None
    (row,) = found
    # float8 as stored; the float tensors (the float32 scales too) in the row's dtype, as stored.py counts them
    assert row.total_bytes == 256 * 128 + 2 * 2 + 100 * 128 * 2 and row.weights_held == "fp8 as stored: F8_E4M3"
    assert row.to_dict()["weights_held"] == "fp8 as stored: F8_E4M3"
    table = to_table(Estimate(model="someone/fp8", library="transformers", source="hub", mode="load", rows=found))
    assert "bfloat16 [fp8 as stored: F8_E4M3]" in table
    from estimator_app.tables import results_frame  # the page says it too, in a column of its own

    frame = results_frame(Estimate(model="someone/fp8", library="transformers", source="hub", mode="load", rows=found))
    assert list(frame["Weights held as"]) == ["fp8 as stored: F8_E4M3"] and list(frame["dtype"]) == ["bfloat16"]
