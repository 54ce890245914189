"""LoRA training of pre-quantized checkpoints: the simulated CPU peak against the allocator's real peak of the same run,
and the one-line refusals where a scheme's training is not simulated.

Each truth is a real run in a fresh process (``testkit/prequant_lora_truth.py``): a tiny model quantized for real on
CPU and saved, loaded inside ``torch.profiler`` as transformers says to load it for fine-tuning (compressed-tensors
and MXFP4 with ``dequantize=True``), ``get_peft_model(LoraConfig(r=8))``, two AdamW steps under bfloat16 autocast; the
simulation (:mod:`estimator.peak.sim.prequant_lora`), built from the config alone, must be within 2%.
``python -m bench.prequant_lora_accuracy`` runs the wider grid (``bench/results/prequant_lora_accuracy.md``).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from testkit.cli_each import run_each
from testkit.peak_pool import run_truth_jobs

TOLERANCE = 0.02
# The dequantize-at-load path once here; `python -m bench.prequant_lora_accuracy` runs 30 pairs (ct_w4a16, ct_fp8,
# fp8_block on ten causal LMs, mxfp4 on two gpt-oss configs; bench/results/prequant_lora_accuracy.md).
PAIRS = [("ct_w4a16", "llama_gqa")]
_SMALL_LLAMA = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "num_key_value_heads": 2, "hidden_size": 64,
                "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 1000,
                "max_position_embeddings": 256, "torch_dtype": "bfloat16"}
_GPTQ = {"quant_method": "gptq", "bits": 4, "group_size": 32, "sym": True, "desc_act": False, "checkpoint_format": "gptq"}


@pytest.fixture(scope="module")
def results() -> dict[tuple[str, str, str], Any]:
    return run_truth_jobs("testkit.prequant_lora_truth",
                          [(side, case, kind) for kind, case in PAIRS for side in ("truth", "sim")], processes=2)


@pytest.fixture(scope="module")
def answers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, subprocess.CompletedProcess[str]]:
    """The CLI's training answers for local configs of each scheme (one subprocess: testkit.cli_each)."""
    from testkit.prequant_lora_truth import LORA_RANK, SEQ_LEN
    from testkit.prequant_truth import QUANTIZATION_CONFIGS

    def folder(name: str, qc: dict[str, Any]) -> str:
        path = tmp_path_factory.mktemp(name)
        (path / "config.json").write_text(json.dumps({**_SMALL_LLAMA, "quantization_config": qc}))
        return str(path)

    common = ("--mode", "training", "--lora-rank", str(LORA_RANK), "--batch-size", "2", "--seq-len", str(SEQ_LEN),
              "--format", "json")
    argvs = {
        "ct_w4a16": (folder("ct", QUANTIZATION_CONFIGS["ct_w4a16"]), *common, "--device", "cpu", "--dtypes", "bfloat16"),
        "gptq": (folder("gptq", _GPTQ), *common, "--device", "cuda", "--dtypes", "bfloat16"),
        "fp8_cuda": (folder("fp8", QUANTIZATION_CONFIGS["fp8_block"]), *common, "--device", "cuda", "--dtypes", "float8"),
    }
    return dict(zip(argvs, run_each(*argvs.values(), env=os.environ), strict=True))


def _row(answer: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert answer.returncode == 0, answer.stderr
    (row,) = json.loads(answer.stdout)["rows"]
    return dict(row)


@pytest.mark.parametrize(("kind", "case"), PAIRS, ids=[f"{k}-{c}" for k, c in PAIRS])
def test_lora_peak_matches_the_allocator(results: dict[tuple[str, str, str], Any], kind: str, case: str) -> None:
    truth, sim = results[("truth", case, kind)], results[("sim", case, kind)]
    assert isinstance(truth, dict), f"ground truth failed: {truth}"
    assert isinstance(sim, dict), f"simulation failed: {sim}"
    assert sim["method"] == "simulated" and sum(sim["components"].values()) == sim["peak_bytes"]
    error = (sim["peak_bytes"] - truth["peak_bytes"]) / truth["peak_bytes"]
    assert abs(error) <= TOLERANCE, f"{case} {kind}: simulated {sim['peak_bytes']:,} vs measured {truth['peak_bytes']:,} ({error:+.2%})"


def test_cli_training_row_of_a_compressed_tensors_checkpoint(results: dict[tuple[str, str, str], Any],
                                                             answers: dict[str, Any]) -> None:
    """A local compressed-tensors W4A16 config with --lora-rank: the bfloat16 row is the run the truth above measures
    (dequantized at load, LoRA on the plain model), and it says how the weights were loaded."""
    row = _row(answers["ct_w4a16"])
    measured = results[("truth", "llama_gqa", "ct_w4a16")]["peak_bytes"]
    assert row["method"] == "simulated" and abs(row["peak_bytes"] - measured) / measured <= TOLERANCE, (row["peak_bytes"], measured)
    assert row["weights_held"] == ("compressed-tensors pack-quantized 4-bit int (group 32), dequantized to bfloat16 at load "
                                   "(CompressedTensorsConfig(dequantize=True)) for training")
    assert any(n.startswith("pre-quantized compressed-tensors checkpoint, training") for n in row["notes"]), row["notes"]


def test_default_load_of_packed_layers_is_refused_by_peft() -> None:
    """Why the simulation loads compressed-tensors with dequantize=True: peft cannot wrap the packed layers a default
    load leaves (no ``weight``)."""
    from testkit.prequant_lora_truth import default_load_refused

    assert "has no attribute 'weight'" in default_load_refused()


def test_gptq_training_row_says_why_in_one_line(answers: dict[str, Any]) -> None:
    row = _row(answers["gptq"])
    assert row["peak_bytes"] is None and not row["components"]
    (line,) = [n for n in row["notes"] if "peak_bytes is null" in n]
    assert line.startswith("bfloat16: LoRA training of a pre-quantized gptq checkpoint") and "not modelled" in line, line


def test_fp8_on_cuda_trains_lora_on_the_weights_as_stored(answers: dict[str, Any]) -> None:
    """Fine-grained FP8 on CUDA: the float8 weights and scales as stored (the row's exact load figure) plus the float32
    LoRA adapters are the weights at the peak; the row says which kernel and backward it assumed."""
    row = _row(answers["fp8_cuda"])
    assert row["method"] == "simulated"
    (trainable,) = [int(n.split()[0].replace(",", "")) for n in row["notes"] if n.endswith("trainable parameters")]
    assert row["components"]["weights"] == row["total_bytes"] + 4 * trainable
    assert row["weights_held"].startswith("fp8 blocks 128x128 as stored (frozen)")
    assert any("FP8LinearFunction.backward" in n for n in row["notes"]), row["notes"]


def test_fp8_backward_dequantizes_the_weight() -> None:
    """One FP8Linear's backward on fakes, as the CUDA simulation runs it: transformers' own FP8LinearFunction.backward
    holds the weight dequantized to the gradient's dtype (N x K) beside the gradients while it makes grad_input."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from transformers.integrations.finegrained_fp8 import FP8Linear

    from estimator.peak.sim import prequant
    from estimator.peak.sim.tracker import StorageTracker

    m, k, n = 48, 256, 384
    fake = FakeTensorMode()
    with fake:
        layer = FP8Linear(k, n, block_size=(128, 128))
        layer.weight.requires_grad_(False)
        layer.weight_scale_inv.requires_grad_(False)
        x = torch.empty((1, m, k), dtype=torch.bfloat16, requires_grad=True)
        out = prequant._fp8_forward(layer.forward, x)
        grad = torch.empty_like(out)
    with fake, StorageTracker() as tracker:
        out.backward(grad)
        peak = tracker.snapshot().peak_bytes
    assert x.grad is not None and x.grad.shape == x.shape
    assert peak >= n * k * 2 + m * k * 2  # the dequantized weight and grad_input, both bfloat16


def test_cli_refuses_nothing_silently(tmp_path: Path) -> None:
    """An unsimulated method (fbgemm_fp8, which transformers will not train) gets its one line, not the unquantized
    model's number."""
    (tmp_path / "config.json").write_text(json.dumps({**_SMALL_LLAMA, "quantization_config": {
        "quant_method": "fbgemm_fp8", "activation_scale_ub": 1200.0}}))
    (answer,) = run_each((str(tmp_path), "--mode", "training", "--lora-rank", "8", "--dtypes", "bfloat16", "--format", "json"),
                         env=os.environ)
    row = _row(answer)
    assert row["peak_bytes"] is None
    assert any(n.startswith("bfloat16: transformers refuses to train an fbgemm_fp8 model") for n in row["notes"]), row["notes"]
