"""Which quantization scheme vLLM would load, said on serving rows (issue 32, item 7).

The rules are vLLM's, read from its source (``estimator/serving/scheme.py`` cites each): vLLM is not installed
here, so the cases below are the conditions of ``GPTQMarlinConfig.is_gptq_marlin_compatible``,
``AWQMarlinConfig.is_awq_marlin_compatible``, ``check_marlin_supported`` and ``Fp8LinearMethod``'s ``use_marlin``
on both sides of each boundary.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from estimator import estimate
from estimator.serving.scheme import vllm_scheme

LLAMA = Path(__file__).resolve().parent / "hub_data" / "models" / "meta-llama" / "Llama-3.1-8B"
GPTQ = {"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": True, "desc_act": False}
AWQ = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"}


@pytest.mark.parametrize(("qc", "quantization", "capability", "scheme"), [
    (None, "none", "8.9", "none"),
    (None, "fp8", "9.0", "fp8"),
    (GPTQ, "none", "8.0", "gptq_marlin"),
    (GPTQ, "none", "7.5", "gptq_marlin"),  # Marlin's types start at sm75
    (GPTQ, "none", "7.0", "gptq"),  # a V100: no Marlin
    ({**GPTQ, "bits": 3}, "none", "9.0", "gptq"),  # (bits, sym) not in TYPE_MAP
    ({**GPTQ, "sym": False}, "none", "9.0", "gptq"),
    ({**GPTQ, "group_size": 256}, "none", "9.0", "gptq"),  # not a Marlin group size
    ({k: v for k, v in GPTQ.items() if k != "desc_act"}, "none", "9.0", "gptq"),  # desc_act not stated
    (AWQ, "none", "8.6", "awq_marlin"),
    ({**AWQ, "bits": 8}, "none", "8.6", "awq"),
    (AWQ, "none", "7.0", "awq"),
    ({"quant_method": "fp8", "weight_block_size": [128, 128]}, "none", "9.0", "fp8"),
    ({"quant_method": "compressed-tensors"}, "none", "9.0", "compressed-tensors"),
    ({"quant_method": "mxfp4"}, "none", "9.0", "mxfp4"),
])
def test_the_scheme_vllm_resolves(qc: dict | None, quantization: str, capability: str, scheme: str) -> None:
    config = SimpleNamespace(**({} if qc is None else {"quantization_config": qc}))
    found, sentence = vllm_scheme(config, quantization, capability)
    assert found == scheme and sentence.startswith("vLLM loads the weights")


def test_fp8_below_sm89_runs_weight_only_through_marlin() -> None:
    config = SimpleNamespace(quantization_config={"quant_method": "fp8"})
    assert "weight-only through the Marlin kernel" in vllm_scheme(config, "none", "8.0")[1]
    assert "Marlin" not in vllm_scheme(config, "none", "9.0")[1]


def test_serving_rows_say_it(tmp_path: Path) -> None:
    plain = estimate(str(LLAMA), mode="serving", gpu="L4", dtypes="bfloat16", max_model_len=4096).row("bfloat16")
    assert plain.serving is not None and plain.serving["vllm_quantization"] == "none"
    assert any(n.startswith("vLLM loads the weights unquantized") for n in plain.notes)
    fp8 = estimate(str(LLAMA), mode="serving", gpu="A100-80GB", dtypes="bfloat16", max_model_len=4096, quantization="fp8").row("bfloat16")
    assert fp8.serving is not None and fp8.serving["vllm_quantization"] == "fp8"
    assert any("--quantization fp8" in n and "Marlin" in n for n in fp8.notes)  # an A100 (8.0) has no FP8 units
    folder = tmp_path / "gptq"
    shutil.copytree(LLAMA, folder)
    import json

    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "quantization_config": GPTQ}))
    gptq = estimate(str(folder), mode="serving", gpu="L4", dtypes="float16", max_model_len=4096).row("float16")
    assert gptq.serving is not None and gptq.serving["vllm_quantization"] == "gptq_marlin", gptq.notes
