"""GPTQ and AWQ checkpoints on CUDA (:mod:`estimator.peak.sim.prequant_marlin`): Marlin is CUDA only, so what it
holds and allocates is modelled from GPTQModel's source; these tests check the model against hand counts of that
source's sizes (no GPU here: the peaks are modelled, not measured, and the rows say so)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from testkit.hub_process import REPO_ROOT

_SMALL_LLAMA = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "num_key_value_heads": 2, "hidden_size": 64,
                "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 1000,
                "max_position_embeddings": 256, "torch_dtype": "float16"}
GPTQ = {"quant_method": "gptq", "bits": 4, "group_size": 32, "desc_act": False, "sym": True, "checkpoint_format": "gptq"}
AWQ = {"quant_method": "awq", "bits": 4, "group_size": 32, "zero_point": True, "version": "gemm"}
# (in_features, out_features) of one llama layer's linears: q, k, v, o (head_dim 16, 2 KV heads), gate, up, down
_LINEARS = [(64, 64), (64, 32), (64, 32), (64, 64), (64, 128), (64, 128), (128, 64)]


def _cli(folder: Path, *args: str) -> list[dict[str, Any]]:
    done = subprocess.run([sys.executable, "-m", "estimator", str(folder), "--mode", "inference", "--batch-size", "2",
                           "--seq-len", "64", "--max-new-tokens", "32", "--format", "json", *args],
                          capture_output=True, text=True, cwd=REPO_ROOT, timeout=600)
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout)["rows"])


def _held_by_hand(awq: bool) -> int:
    """Bytes Marlin holds after post_init, counted from the stored layout: 4-bit qweight (in x out / 2 bytes), float16
    scales per group of 32 inputs, AWQ's 4-bit zero points (a symmetric GPTQ layer's are emptied), a 128-int32
    workspace per layer (max(108 SMs, 128)); float16 embeddings, lm_head and norms as stored; the rotary embedding's
    float32 inv_freq and original_inv_freq (head_dim / 2 each)."""
    per_layer = sum(i * o // 2 + (i // 32) * o * 2 + ((i // 32) * o // 2 if awq else 0) + 128 * 4 for i, o in _LINEARS)
    return 2 * per_layer + 2 * 1000 * 64 * 2 + (2 * 2 + 1) * 64 * 2 + 2 * 8 * 4


@pytest.mark.parametrize(("qc", "awq", "label"), [(GPTQ, False, "GPTQ 4-bit group 32"), (AWQ, True, "AWQ 4-bit group 32")],
                         ids=["gptq", "awq"])
def test_cuda_row_holds_the_packed_weights_as_marlin_keeps_them(tmp_path: Path, qc: dict[str, Any], awq: bool,
                                                                 label: str) -> None:
    (tmp_path / "config.json").write_text(json.dumps({**_SMALL_LLAMA, "quantization_config": qc}))
    (row,) = _cli(tmp_path, "--device", "cuda", "--dtypes", "float16")
    assert row["method"] == "simulated" and row["peak_bytes"] == sum(row["components"].values())
    assert row["weights_held"] == f"{label} as stored; Marlin kernel (modelled from its source)"
    assert row["components"]["weights"] == _held_by_hand(awq)
    assert any("modelled, not measured" in n and "gptq_marlin.cu" in n for n in row["notes"]), row["notes"]


def test_cpu_row_says_why_it_has_no_peak(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({**_SMALL_LLAMA, "quantization_config": GPTQ}))
    (row,) = _cli(tmp_path, "--device", "cpu", "--dtypes", "float16")
    assert row["peak_bytes"] is None
    assert any("gptqmodel's torch kernels, which are not modelled" in n for n in row["notes"]), row["notes"]
    (row,) = _cli(tmp_path, "--device", "cuda", "--dtypes", "float32")  # Marlin's SUPPORTS_DTYPES: float16, bfloat16
    assert row["peak_bytes"] is None and any("Marlin computes in float16 / bfloat16 only" in n for n in row["notes"])


@pytest.mark.parametrize(("m", "desc_act"), [(1, False), (20, False), (128, False), (128, True)])
def test_marlin_call_allocates_what_gptq_marlin_gemm_allocates(m: int, desc_act: bool) -> None:
    """One call: the output (m x n, float16), the fp32-reduce buffer (108 SMs x min(round16(m), 64) x 256 float32,
    gptq_marlin.cu) and, with act order, a_tmp (m x k, float16), all alive at once inside the kernel."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from estimator.peak.sim.prequant_marlin import MarlinLinear
    from estimator.peak.sim.tracker import StorageTracker

    k, n = 256, 384
    layer = MarlinLinear(k, n, bias=False, bits=4, group_size=128, desc_act=desc_act, awq=False, dtype=torch.float16)
    assert layer.workspace.numel() == 128 and layer.workspace.dtype == torch.int32  # max(108, 128)
    fake = FakeTensorMode()
    with fake:
        x = torch.empty((1, m, k), dtype=torch.float16)
    with fake, StorageTracker() as tracker:
        out = layer(x)
        peak = tracker.snapshot().peak_bytes
    assert out.shape == (1, m, n) and out.dtype == torch.float16
    round16 = -(-m // 16) * 16
    assert peak == m * n * 2 + 108 * min(round16, 64) * 256 * 4 + (m * k * 2 if desc_act else 0)


def test_variants_marlin_does_not_take_stay_unsimulated() -> None:
    from estimator.peak.sim.prequant import Scheme, scheme_of

    assert scheme_of(GPTQ) is Scheme.GPTQ and scheme_of(AWQ) is Scheme.AWQ
    assert scheme_of({**GPTQ, "sym": False}) is None  # MarlinQuantLinear.SUPPORTS_SYM = [True]
    assert scheme_of({**GPTQ, "bits": 3}) is None
    assert scheme_of({**AWQ, "version": "gemv"}) is None


def test_config_only_folder_says_its_float_row_is_not_what_loads(tmp_path: Path) -> None:
    """A config-only folder declaring GPTQ: its float16 load row is the unquantized build (exact bytes of that build,
    the same as without the declaration), and the row says so in weights_held and a note (issue 32, 'Why')."""
    (tmp_path / "config.json").write_text(json.dumps({**_SMALL_LLAMA, "quantization_config": GPTQ}))
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "config.json").write_text(json.dumps(_SMALL_LLAMA))

    def load_row(folder: Path) -> dict[str, Any]:
        done = subprocess.run([sys.executable, "-m", "estimator", str(folder), "--dtypes", "float16", "--format", "json"],
                              capture_output=True, text=True, cwd=REPO_ROOT, timeout=600)
        assert done.returncode == 0, done.stderr
        (row,) = json.loads(done.stdout)["rows"]
        return dict(row)

    declared, unquantized = load_row(tmp_path), load_row(plain)
    assert declared["total_bytes"] == unquantized["total_bytes"] and unquantized["weights_held"] is None
    assert declared["weights_held"] == "float16: the unquantized build, not what this gptq checkpoint loads"
    assert any("declares a pre-quantized checkpoint (gptq, 4-bit)" in n for n in declared["notes"]), declared["notes"]
