"""``--mode serving`` through the Python API and the CLI, and its profile run against the real allocator.

The model is the Llama-3.1-8B fixture folder (its published config.json): KV bytes per token 131,072
(32 layers x 8 KV heads x 128 x K and V x 2 bytes, the figure published for it), so every block and
token figure of the plan is checked here from the budget the plan reports. The profile run's
profile run is checked against real vLLM start-ups in tests/test_serving_vllm_runs.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from estimator import estimate
from estimator.errors import BadOptionError

ROOT = Path(__file__).resolve().parents[1]
LLAMA = str(ROOT / "tests" / "hub_data" / "models" / "meta-llama" / "Llama-3.1-8B")
GiB = 1024**3
PER_TOKEN = 32 * 8 * 128 * 2 * 2


@pytest.fixture(scope="module")
def plan_24g() -> Any:
    return estimate(LLAMA, mode="serving", gpu_memory="24GiB", max_model_len=8192, dtypes=["bfloat16", "int4"])


def test_plan_adds_up(plan_24g: Any) -> None:
    row = plan_24g.row("bfloat16")
    s = row.serving
    assert row.method == "simulated"
    assert s["capacity_bytes"] == 24 * GiB
    assert s["requested_bytes"] == int(24 * GiB * 0.9)
    # the parameters (8,030,261,248 in bf16; the row also counts transformers' 512 bytes of inv_freq buffers, which vLLM
    # has not) and vLLM's rotary cos_sin_cache (131,072 positions x 128 x 2 bytes, one shared by the layers)
    assert row.total_bytes == 8_030_261_248 * 2 + 512
    assert s["weights_bytes"] == 8_030_261_248 * 2 + 131072 * 128 * 2
    assert s["non_torch_bytes"] == int(0.16 * GiB)  # the first forward's, published (estimator.serving.versions)
    assert s["available_kv_cache_bytes"] == s["requested_bytes"] - s["weights_bytes"] - s["profile_peak_bytes"] - s["non_torch_bytes"]
    assert s["vllm_version"] == "0.19" and (s["tensor_parallel_size"], s["pipeline_parallel_size"]) == (1, 1)
    assert s["kv_bytes_per_token"] == PER_TOKEN
    tokens = s["available_kv_cache_bytes"] // PER_TOKEN
    assert s["kv_cache_tokens"] == tokens - tokens % 16
    assert s["num_blocks"] == s["kv_cache_tokens"] // 16
    assert row.components == {"weights": s["weights_bytes"], "activations": s["profile_peak_bytes"],
                              "kv_cache": s["kv_cache_tokens"] * PER_TOKEN}
    assert row.peak_bytes == sum(row.components.values()) <= s["requested_bytes"]
    assert s["max_concurrency"] == pytest.approx(s["kv_cache_tokens"] / 8192, abs=1e-4)
    # vLLM serve's defaults on a 24 GiB GPU
    assert (s["max_num_batched_tokens"], s["max_num_seqs"]) == (2048, 256)
    assert s["fits"] is True
    assert any("2048 tokens" in n or "2,048 tokens in 256 requests" in n for n in row.notes)


def test_quantized_rows_say_why(plan_24g: Any) -> None:
    row = plan_24g.row("int4")
    assert row.peak_bytes is None and row.serving is None
    assert any("serving is planned for float32, float16 and bfloat16" in n for n in row.notes)


def test_fp8_cache_and_a_named_gpu() -> None:
    from estimator.fit.gpus import find_gpu

    h100 = find_gpu("H100 80GB")
    result = estimate(LLAMA, mode="serving", gpu="H100-80GB", kv_cache_dtype="fp8", max_model_len=32768, dtypes="bfloat16")
    s = result.row("bfloat16").serving
    assert s["capacity_bytes"] == h100.total_bytes  # what the driver reports: vLLM's total_memory
    assert s["kv_bytes_per_token"] == PER_TOKEN // 2
    assert (s["max_num_batched_tokens"], s["max_num_seqs"]) == (8192, 1024)  # vllm serve on a GPU of 70 GiB or more
    assert s["kv_cache_tokens"] == s["available_kv_cache_bytes"] // (PER_TOKEN // 2) // 16 * 16
    assert result.options["kv_cache_dtype"] == "fp8"


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({}, BadOptionError, r"--mode serving plans a server on one GPU: name it with --gpu .* or give its memory with --gpu-memory"),
    ({"gpu": "RTX 1"}, BadOptionError, r"--gpu 'RTX 1' is not a GPU we know: use one of .*H100"),
    ({"gpu_memory": "lots"}, BadOptionError, r"--gpu-memory must be a size such as 24GiB"),
    ({"gpu_memory": "24GiB", "gpu_memory_utilization": 1.5}, BadOptionError, r"--gpu-memory-utilization must be a fraction"),
    ({"gpu_memory": "24GiB", "kv_cache_dtype": "fp4"}, BadOptionError, r"--kv-cache-dtype must be one of auto, fp8"),
    ({"gpu_memory": "24GiB", "max_num_seqs": 4096, "max_num_batched_tokens": 2048}, BadOptionError,
     r"--max-num-batched-tokens \(2,048\) must be at least --max-num-seqs \(4,096\)"),
    ({"gpu_memory": "24GiB", "max_model_len": 200_000}, BadOptionError, r"--max-model-len 200,000 is more than .*131,072"),
    ({"gpu_memory": "24GiB", "device": "cpu"}, BadOptionError, r"needs --device cuda"),
])
def test_bad_requests_are_refused(kwargs: dict[str, Any], error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        estimate(LLAMA, mode="serving", dtypes="bfloat16", **kwargs)


def test_bfloat16_is_refused_where_vllm_refuses_it() -> None:
    result = estimate(LLAMA, mode="serving", gpu="T4", dtypes=["bfloat16", "float16"], max_model_len=2048)
    assert result.row("bfloat16").peak_bytes is None
    assert any("vLLM refuses bfloat16 on the T4" in n for n in result.row("bfloat16").notes)
    assert result.row("float16").serving is not None


def test_too_small_a_gpu_does_not_fit() -> None:
    row = estimate(LLAMA, mode="serving", gpu_memory="16GiB", dtypes="bfloat16", max_model_len=8192).row("bfloat16")
    assert row.serving["fits"] is False and row.serving["num_blocks"] == 0
    assert any(n.startswith("does not fit") for n in row.notes)


def test_cli_json_has_the_serving_object() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-m", "estimator", LLAMA, "--mode", "serving", "--gpu-memory", "48GiB",
                          "--max-model-len", "16384", "--max-num-seqs", "64", "--dtypes", "float16", "--format", "json"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    s = data["rows"][0]["serving"]
    assert data["mode"] == "serving" and data["options"]["max_num_seqs"] == 64
    assert (s["max_num_seqs"], s["max_model_len"], s["capacity_bytes"]) == (64, 16384, 48 * GiB)
    missing = subprocess.run([sys.executable, "-m", "estimator", LLAMA, "--mode", "serving"], capture_output=True, text=True,
                             env=env, timeout=300)
    assert missing.returncode == 2 and missing.stdout == ""
    assert "--gpu" in missing.stderr and "--gpu-memory" in missing.stderr


def test_dataframe_has_a_column_per_plan_figure(plan_24g: Any) -> None:
    frame = plan_24g.to_dataframe()
    plan = plan_24g.row("bfloat16").serving
    first = frame.iloc[0]
    assert {f"serving_{key}" for key in plan} <= set(frame.columns)
    assert int(first["serving_num_blocks"]) == plan["num_blocks"] and str(frame["serving_num_blocks"].dtype) == "Int64"
    assert frame["serving_num_blocks"].isna().iloc[1]  # the int4 row has no plan


def test_a_config_that_states_its_length_as_n_positions_is_held_to_it() -> None:
    """GPT-2's config.json states ``n_positions`` (1,024), not ``max_position_embeddings``: the
    same fields the position warning and the fit read (``source.limits.position_field``)."""
    gpt2 = str(ROOT / "tests" / "hub_data" / "models" / "openai-community" / "gpt2")
    assert json.loads((Path(gpt2) / "config.json").read_text())["n_positions"] == 1024
    with pytest.raises(BadOptionError, match=r"--max-model-len 2,048 is more than .*'s n_positions \(1,024\)"):
        estimate(gpt2, mode="serving", gpu_memory="24GiB", dtypes="float16", max_model_len=2048)
    row = estimate(gpt2, mode="serving", gpu_memory="24GiB", dtypes="float16").row("float16")
    assert row.serving["max_model_len"] == 1024


def test_tensor_and_pipeline_parallel_plans_are_per_rank() -> None:
    """vLLM's per-rank budget (Llama-3.1-8B on H100s): TP2 halves every matrix and KV head; PP2 plans both stages,
    the last one (logits, sampler, received activations) holding the fewest blocks and sizing the cache."""
    one, tp2, pp2 = (estimate(LLAMA, mode="serving", gpu="H100-80GB", dtypes="bfloat16", max_model_len=8192, **kw).row("bfloat16").serving
                     for kw in ({}, {"tensor_parallel_size": 2}, {"pipeline_parallel_size": 2}))
    rope = 131072 * 128 * 2
    norms = (2 * 32 + 1) * 4096 * 2  # two RMSNorms a layer and the final one: replicated on every rank
    assert tp2["weights_bytes"] == (one["weights_bytes"] - rope - norms) // 2 + norms + rope
    assert tp2["kv_bytes_per_token"] == PER_TOKEN // 2 and tp2["non_torch_bytes"] == int(0.16 * GiB) + int((3.58 - 1.79) * GiB)  # PR #12126; PR #10511 TP2 - TP1
    assert tp2["profile_peak_bytes"] == one["profile_peak_bytes"]  # the sampler phase decides it: logits are gathered
    stages = pp2["ranks"]
    assert [s["stage"] for s in stages] == [0, 1] and pp2["limiting_stage"] == 1
    assert stages[1]["num_blocks"] == pp2["num_blocks"] < stages[0]["num_blocks"]
    assert stages[1]["kept_bytes"]["intermediate_tensors"] == 2 * 8192 * 4096 * 2  # hidden states and residual received
    assert pp2["kv_bytes_per_token"] == PER_TOKEN // 2  # 16 of 32 layers per stage
    assert pp2["kv_cache_tokens"] == pp2["num_blocks"] * 16
    # the cold compile benchmarks the first stage's embedding gather + input norm on random copies of its arguments:
    # the 128,256 x 4,096 table and two 8,192 x 4,096 outputs; later stages have no gather
    assert stages[0]["compile_bytes"] == (128256 * 4096 + 2 * 8192 * 4096) * 2 == stages[0]["profile_peak_bytes"]
    assert stages[1]["compile_bytes"] == 0 and pp2["profile_phase"] == "sampler"
    assert tp2["ranks"][0]["compile_bytes"] == (128256 // 2 * 4096 + 8192 * 4096) * 2  # vocab split, all-reduce before the norm


def test_the_sampler_buffer_follows_the_gpus_multiprocessors() -> None:
    """vLLM 0.19's Triton top-k/top-p caches one float32 vocabulary row per program, min(next_pow2(min(SMs, requests)),
    SMs) rows: 132 on an H100 SXM, 108 on an A100 (1,024 and 256 requests by default on those GPUs)."""
    h100, a100 = (estimate(LLAMA, mode="serving", gpu=g, dtypes="bfloat16", max_model_len=8192, max_num_seqs=256,
                           max_num_batched_tokens=8192).row("bfloat16").serving["ranks"][0] for g in ("H100-80GB", "A100-80GB"))
    assert h100["sampler_bytes"] - a100["sampler_bytes"] == (132 - 108) * 128256 * 4


def test_a_bad_vllm_version_exits_2() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-m", "estimator", LLAMA, "--mode", "serving", "--gpu", "H100-80GB", "--dtypes", "bfloat16",
                          "--vllm-version", "0.18"], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 2 and out.stdout == "", out.stderr
    assert "--vllm-version must be one of 0.19" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"mode": "inference", "tensor_parallel_size": 2}, "shape --mode serving only"),
    ({"tensor_parallel_size": 0}, "--tensor-parallel-size must be"),
    ({"quantization": "awq"}, "--quantization must be one of none, fp8"),
    ({"vllm_version": "v0.19.1", "pipeline_parallel_size": 0}, "--pipeline-parallel-size must be"),  # 0.19.x is 0.19
    ({"pipeline_parallel_size": 64, "max_model_len": 8192}, "--pipeline-parallel-size 64 is more than the model's 32 layers"),
])
def test_vllm_options_are_checked_before_any_work(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(BadOptionError, match=match):
        estimate(LLAMA, **{"mode": "serving", "gpu": "H100-80GB", **kwargs})


def test_an_image_text_to_text_model_is_served_with_its_encoder_profiled() -> None:
    """Gemma-3-4B (tests/data/serving: a reconstruction of its config): vLLM's multimodal profile run encodes
    8,192 // 256 = 32 images of 896 px (4,096 patches each) and keeps their 256 embeddings each in the encoder cache."""
    gemma3 = str(ROOT / "tests" / "data" / "serving" / "gemma-3-4b-it")
    s = estimate(gemma3, mode="serving", gpu="H100-80GB", dtypes="bfloat16", max_model_len=8192).row("bfloat16").serving
    rank = s["ranks"][0]
    assert rank["kept_bytes"]["encoder_cache"] == 32 * 256 * 2560 * 2
    assert rank["kept_bytes"]["mm_dummy_inputs"] == 32 * 3 * 896 * 896 * 4  # float32 pixel_values, held by profile_run
    pixels, rows = 32 * 3 * 896 * 896 * 2, 32 * 4096
    assert rank["encoder_bytes"] == pixels + rows * (2 * 1152 + 2 * 4304) * 2  # the ViT's busiest layer: its MLP
    kept = rank["kept_bytes"]
    encoder_run = kept["cublas_workspace"] + kept["encoder_cache"] + kept["mm_dummy_inputs"] + rank["encoder_bytes"]
    assert rank["compile_bytes"] == 0  # the runner embeds the tokens (inputs_embeds): no gather in the compiled graph
    assert s["profile_peak_bytes"] == max(sum(kept.values()) + max(rank["forward_bytes"], rank["sampler_bytes"]), encoder_run)
    assert s["kv_cache_groups"] == 7  # 5 full and 29 sliding layers in groups of 5: 1 full group, 6 sliding ones
    assert s["fits"] is True
