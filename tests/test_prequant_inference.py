"""Pre-quantized checkpoints: the simulated CPU peak against the allocator's real peak of the same run.

Each truth is a real run in a fresh process (``testkit/prequant_truth.py``): a tiny model quantized for real on
CPU (compressed-tensors' and torchao's own quantization; the fine-grained fp8 and gpt-oss's MXFP4 layouts written with
torch), saved, loaded inside
``torch.profiler`` with ``from_pretrained(dtype=torch.bfloat16)`` and run with ``generate`` (prefill and 32 new
tokens); the maximum "Total Allocated" of the work's window. The simulation (``simulate_peak`` with the
checkpoint's ``quantization_config``, :mod:`estimator.peak.sim.prequant`), built from the config alone, must be
within 2%. ``python -m bench.prequant_accuracy`` runs the wider grid (``bench/results/prequant_accuracy.md``).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testkit.cli_each import Started, start_each
from testkit.peak_pool import run_truth_jobs

TOLERANCE = 0.02
# One case per scheme's code path; `python -m bench.prequant_accuracy` runs every scheme on ten architectures
# (bench/results/prequant_accuracy.md, reported in the README). ao_int8's weights are checked part by part below.
GRID: dict[str, tuple[str, ...]] = {
    "ct_w4a16": ("llama_gqa",),
    "ct_fp8": ("phi3",),
    "fp8_block": ("llama_gqa",),
    "mxfp4": ("gpt_oss_swa",),
    "ao_int4": ("llama_gqa",),
}
PAIRS = [(kind, case) for kind, cases in GRID.items() for case in cases]
_SMALL_LLAMA = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "num_key_value_heads": 2, "hidden_size": 64,
                "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 1000,
                "max_position_embeddings": 256, "torch_dtype": "bfloat16"}


_DEEPSEEK_V3 = {"model_type": "deepseek_v3", "architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 64, "intermediate_size": 128,
                "moe_intermediate_size": 32, "n_routed_experts": 4, "num_experts_per_tok": 2, "n_shared_experts": 1,
                "first_k_dense_replace": 1, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4,
                "kv_lora_rank": 16, "q_lora_rank": 32, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8, "v_head_dim": 8, "vocab_size": 1000,
                "n_group": 1, "topk_group": 1, "max_position_embeddings": 256, "torch_dtype": "bfloat16"}
# torchao's Int4WeightOnlyConfig (tinygemm's tile-packed layout, CUDA-only kernels), beside the IntxWeightOnlyConfig case
_AO_TINYGEMM = {"default": {"_type": "Int4WeightOnlyConfig", "_version": 2, "_data": {
    "group_size": 32, "int4_packing_format": {"_type": "Int4PackingFormat", "_data": "TILE_PACKED_TO_4D"},
    "int4_choose_qparams_algorithm": {"_type": "Int4ChooseQParamsAlgorithm", "_data": "HQQ"}}}}
# the CLI's questions of this module: name -> (config folder, --device, --dtypes ...)
QUESTIONS = {
    "ct_w4a16": ("ct_w4a16", "cpu", "bfloat16"),
    "fp8_cpu": ("fp8_block", "cpu", "float8"),
    "fp8_cuda": ("fp8_block", "cuda", "float8"),
    "fp8_moe_cuda": ("deepseek_v3", "cuda", "float8"),
    "mxfp4_cpu": ("mxfp4", "cpu", "bfloat16"),
    "ao_int4_cpu": ("ao_int4", "cpu", "bfloat16"),
    "ao_tinygemm_cpu": ("ao_tinygemm", "cpu", "bfloat16"),
    "ao_tinygemm_cuda": ("ao_tinygemm", "cuda", "bfloat16", "float16"),
}


def _configs() -> dict[str, dict[str, Any]]:
    """The local config folders the CLI reads: a quantization_config of testkit.prequant_truth on the small Llama (on a
    small DeepSeek-V3 and gpt-oss for the MoE layouts)."""
    from testkit.prequant_truth import QUANTIZATION_CONFIGS

    configs = {kind: {**_SMALL_LLAMA, "quantization_config": QUANTIZATION_CONFIGS[kind]} for kind in ("ct_w4a16", "fp8_block", "ao_int4")}
    configs["ao_tinygemm"] = {**_SMALL_LLAMA, "quantization_config": {**QUANTIZATION_CONFIGS["ao_int4"], "quant_type": _AO_TINYGEMM}}
    configs["deepseek_v3"] = {**_DEEPSEEK_V3, "quantization_config": QUANTIZATION_CONFIGS["fp8_block"]}
    configs["mxfp4"] = _tiny_gpt_oss_config()
    return configs


@pytest.fixture(scope="module")
def started_cli(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Started]:
    """The CLI's answers to :data:`QUESTIONS`, every ``estimate-memory FOLDER --mode inference ...`` run in one real
    subprocess (testkit.cli_each, the imports paid once), started here and waited for by :func:`cli`."""
    folders = {}
    for name, config in _configs().items():
        folders[name] = tmp_path_factory.mktemp(name)
        (folders[name] / "config.json").write_text(json.dumps(config))
    argvs = [(str(folders[folder]), "--mode", "inference", "--batch-size", "2", "--seq-len", "64", "--max-new-tokens", "32",
              "--format", "json", "--device", device, "--dtypes", *dtypes) for folder, device, *dtypes in QUESTIONS.values()]
    started = start_each(*argvs, env=os.environ, timeout=900)
    yield started
    started.stop()


@pytest.fixture(scope="module")
def cli(started_cli: Started) -> dict[str, subprocess.CompletedProcess[str]]:
    """``{question: its answer}`` (stdout, stderr, exit status), waited for here."""
    return dict(zip(QUESTIONS, started_cli.wait(), strict=True))


def _cli(cli: dict[str, subprocess.CompletedProcess[str]], question: str) -> list[dict[str, Any]]:
    """The rows of one question's JSON answer."""
    done = cli[question]
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout)["rows"])


@pytest.fixture(scope="module")
def results(started_cli: Started) -> dict[tuple[str, str, str], Any]:
    """Truths and simulations of :data:`PAIRS`, each in a fresh forked process (testkit.peak_pool); the CLI's
    subprocess (``started_cli``) is started first, so its answers are computed while the pool measures."""
    return run_truth_jobs("testkit.prequant_truth", [(side, case, kind) for kind, case in PAIRS for side in ("truth", "sim")],
                          processes=2)


@pytest.mark.parametrize(("kind", "case"), PAIRS, ids=[f"{k}-{c}" for k, c in PAIRS])
def test_prequantized_peak_matches_the_allocator(results: dict[tuple[str, str, str], Any], kind: str, case: str) -> None:
    truth, sim = results[("truth", case, kind)], results[("sim", case, kind)]
    assert isinstance(truth, dict), f"ground truth failed: {truth}"
    assert isinstance(sim, dict), f"simulation failed: {sim}"
    assert sim["method"] == "simulated", sim["notes"]
    assert sum(sim["components"].values()) == sim["peak_bytes"]
    assert any(n.startswith("pre-quantized") for n in sim["notes"]), sim["notes"]
    error = (sim["peak_bytes"] - truth["peak_bytes"]) / truth["peak_bytes"]
    assert abs(error) <= TOLERANCE, f"{case} {kind}: simulated {sim['peak_bytes']:,} vs measured {truth['peak_bytes']:,} ({error:+.2%})"


def test_cli_rows_of_a_compressed_tensors_checkpoint(results: dict[tuple[str, str, str], Any],
                                                     cli: dict[str, subprocess.CompletedProcess[str]]) -> None:
    """A local compressed-tensors W4A16 config: the bfloat16 row is the simulation the truth above checks, and it
    names the scheme and what the weights become."""
    (row,) = _cli(cli, "ct_w4a16")
    measured = results[("truth", "llama_gqa", "ct_w4a16")]["peak_bytes"]
    assert row["method"] == "simulated" and abs(row["peak_bytes"] - measured) / measured <= TOLERANCE, (row["peak_bytes"], measured)
    assert row["weights_held"] == ("compressed-tensors pack-quantized 4-bit int (group 32), decompressed to bfloat16 at "
                                   "the first forward")


def test_float8_rows_of_an_fp8_checkpoint_are_filled(results: dict[tuple[str, str, str], Any],
                                                     cli: dict[str, subprocess.CompletedProcess[str]]) -> None:
    """The float8 row of an fp8 checkpoint gets a peak: on CPU the dequantized model the truth measures; on CUDA the
    float8 weights as stored (the row's exact load figure) plus the modelled kernel's buffers, labelled so."""
    (cpu,) = _cli(cli, "fp8_cpu")
    measured = results[("truth", "llama_gqa", "fp8_block")]["peak_bytes"]
    assert cpu["method"] == "simulated" and abs(cpu["peak_bytes"] - measured) / measured <= TOLERANCE, (cpu["peak_bytes"], measured)
    assert cpu["weights_held"] == "fp8 blocks 128x128, dequantized to bfloat16 at load (CPU)"
    (cuda,) = _cli(cli, "fp8_cuda")
    assert cuda["method"] == "simulated" and cuda["weights_held"] == "fp8 blocks 128x128 as stored; finegrained-fp8 kernel (modelled)"
    assert cuda["components"]["weights"] == cuda["total_bytes"]  # the float8 weights and scales, exactly as the load row
    assert cuda["peak_bytes"] < cpu["peak_bytes"]  # float8 weights held, not dequantized
    assert any("transformers 4.57 integrations/finegrained_fp8.py" in n for n in cuda["notes"])


def test_fp8_kernel_buffers_follow_their_source() -> None:
    """One FP8Linear call on CUDA: the modelled buffers are those of transformers 4.57's ``FP8Linear.forward``
    (act_quant's float8 copy of the input and float32 scale per 128 columns, the output, nan_to_num's copy),
    counted by the tracker while the call runs."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from estimator.peak.sim import prequant
    from estimator.peak.sim.tracker import StorageTracker

    m, k, n = 48, 256, 384
    fake = FakeTensorMode()
    with fake:
        x = torch.empty((1, m, k), dtype=torch.bfloat16)
        w = torch.empty((n, k), dtype=torch.float8_e4m3fn)
        s = torch.empty((n // 128, k // 128), dtype=torch.float32)
    with fake, StorageTracker() as tracker:
        out = prequant._fp8_linear_buffers(x, w, s, [128, 128])
        peak = tracker.snapshot().peak_bytes
    assert out.shape == (1, m, n) and out.dtype == torch.bfloat16
    # y (float8, m x k) and s (float32, m x k/128) live to the end of the forward, beside C and nan_to_num's copy
    assert peak == m * k + m * (k // 128) * 4 + 2 * m * n * 2


def test_float8_row_of_an_fp8_moe_checkpoint_holds_its_experts_as_stored(cli: dict[str, subprocess.CompletedProcess[str]]) -> None:
    """DeepSeek-V3's layout, small (MLA, routed and shared experts, fp8 blocks of 128): on CUDA the float8 row's
    weights at the peak are exactly its load figure (the FP8Experts' float8 stacks and scales as stored)."""
    (row,) = _cli(cli, "fp8_moe_cuda")
    assert row["method"] == "simulated" and row["peak_bytes"] > row["total_bytes"]
    assert row["components"]["weights"] == row["total_bytes"]
    assert row["weights_held"] == "fp8 blocks 128x128 as stored; finegrained-fp8 kernel (modelled)"


def _tiny_gpt_oss_config() -> dict[str, Any]:
    from testkit.prequant_truth import MXFP4_CASES, QUANTIZATION_CONFIGS

    config = MXFP4_CASES["gpt_oss_swa"].build_on("meta").config.to_dict()  # type: ignore[union-attr]
    return {**config, "architectures": ["GptOssForCausalLM"], "torch_dtype": "bfloat16",
            "quantization_config": QUANTIZATION_CONFIGS["mxfp4"]}


def test_cli_rows_of_an_mxfp4_checkpoint_on_cpu(results: dict[tuple[str, str, str], Any],
                                                cli: dict[str, subprocess.CompletedProcess[str]]) -> None:
    """A local gpt-oss MXFP4 config on CPU: the bfloat16 row is the simulation the truth above checks (the experts
    dequantized at load), and it says so."""
    (row,) = _cli(cli, "mxfp4_cpu")
    measured = results[("truth", "gpt_oss_swa", "mxfp4")]["peak_bytes"]
    assert row["method"] == "simulated" and abs(row["peak_bytes"] - measured) / measured <= TOLERANCE, (row["peak_bytes"], measured)
    assert row["weights_held"] == "mxfp4 experts, dequantized to bfloat16 at load (CPU)"
    assert any(n.startswith("pre-quantized mxfp4 checkpoint on CPU") for n in row["notes"]), row["notes"]


def test_mxfp4_dequantized_experts_are_the_plain_experts() -> None:
    """What the CPU simulation assumes, checked with transformers' own load op: ``Mxfp4Dequantize`` turns a stored
    ``*_blocks`` / ``*_scales`` pair into a tensor of the shape and dtype of ``GptOssExperts``' parameter (so the
    dequantized model is the plain one), and the values are the ones quantized (e2m1 codes and power-of-two scales
    read back exactly)."""
    import torch
    from transformers.integrations.mxfp4 import Mxfp4Dequantize

    from testkit.prequant_truth import FP4_VALUES, MXFP4_CASES, mxfp4_blocks

    torch.manual_seed(0)
    model = MXFP4_CASES["gpt_oss_swa"].build().to(torch.bfloat16)  # type: ignore[operator, union-attr]
    experts = model.model.layers[0].mlp.experts  # type: ignore[union-attr]
    for proj in ("gate_up_proj", "down_proj"):
        weight = getattr(experts, proj).detach()
        blocks, scales = mxfp4_blocks(weight.transpose(1, 2))
        name = f"model.layers.0.mlp.experts.{proj}"
        found = Mxfp4Dequantize(None).convert({f"{proj}_blocks": blocks, f"{proj}_scales": scales}, model=model,
                                              full_layer_name=name)[name]
        assert found.shape == weight.shape and found.dtype == weight.dtype == torch.bfloat16
        assert found.untyped_storage().nbytes() == weight.numel() * 2
        codes = torch.stack((blocks & 0x0F, blocks >> 4), dim=-1).flatten(-2).long()  # even element: low nibble
        values = torch.tensor(FP4_VALUES)[codes] * torch.exp2(scales.float() - 127)[..., None]
        assert torch.equal(found, values.flatten(-2).transpose(1, 2).to(torch.bfloat16))


def test_cli_rows_of_torchao_checkpoints(results: dict[tuple[str, str, str], Any], cli: dict[str, subprocess.CompletedProcess[str]]) -> None:
    """A local torchao IntxWeightOnlyConfig int4 config: the bfloat16 row is the simulation the truth above checks
    and names the config; an Int4WeightOnlyConfig one (CUDA-only kernels) keeps a null peak and says why."""
    (row,) = _cli(cli, "ao_int4_cpu")
    measured = results[("truth", "llama_gqa", "ao_int4")]["peak_bytes"]
    assert row["method"] == "simulated" and abs(row["peak_bytes"] - measured) / measured <= TOLERANCE, (row["peak_bytes"], measured)
    assert row["weights_held"] == ("torchao IntxWeightOnlyConfig int4, PerGroup 32 as stored (torchao tensor subclasses); "
                                   "torchao's own linear")
    (cpu,) = _cli(cli, "ao_tinygemm_cpu")
    assert cpu["peak_bytes"] is None, cpu
    assert any("torchao Int4WeightOnlyConfig (tile_packed_to_4d) layers run tinygemm (aten._weight_int4pack_mm, no CPU "
               "kernel), which cannot run on CPU" in n for n in cpu["notes"]), cpu["notes"]
    cuda, half = _cli(cli, "ao_tinygemm_cuda")
    assert cuda["method"] == "simulated" and half["peak_bytes"] is None, (cuda, half)
    assert cuda["weights_held"] == ("torchao Int4WeightOnlyConfig tile_packed_to_4d group 32 as stored (torchao tensor "
                                    "subclasses); torchao's own linear")
    # tinygemm's layout, by hand (torch's _convert_weight_to_int4pack: [n/8][k/(8*16)][32][4] int32 of in_features
    # padded to 1024, out_features to 8; scales and zeros [k/32][n][2] bfloat16): q, k, v, o, gate, up, down
    linears = [(64, 64), (32, 64), (32, 64), (64, 64), (128, 64), (128, 64), (64, 128)]
    packed = sum(n * -(-k // 1024) * 1024 // 2 + -(-k // 1024) * 1024 // 32 * n * 2 * 2 for n, k in linears)
    # embeddings, lm_head, norms, rotary inv_freq and original_inv_freq (head_dim 16: 8 float32 each)
    plain = 2 * 1000 * 64 * 2 + (2 * 2 + 1) * 64 * 2 + 2 * 8 * 4
    assert cuda["components"]["weights"] == 2 * packed + plain


@pytest.mark.parametrize("kind", ["ao_int4", "ao_int8"])
def test_torchao_weights_held_are_the_loaded_ones(kind: str, tmp_path: Path) -> None:
    """The torchao subclasses built on the fakes hold exactly the bytes of the real checkpoint's loaded weights
    (torchao quantizing for real on CPU, saved and loaded with ``from_pretrained``), part by part; and the config the
    simulation reads is the one ``save_pretrained`` wrote."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass
    from transformers import AutoModelForCausalLM

    from estimator.peak.sim.materialize import materialize
    from estimator.peak.sim.prequant_torchao import quantize
    from testkit.checkpoint_truth import meta_bf16
    from testkit.prequant_truth import QUANTIZATION_CONFIGS, case_of, make_checkpoint

    make_checkpoint("llama_gqa", kind, str(tmp_path))
    assert json.loads((tmp_path / "config.json").read_text())["quantization_config"] == QUANTIZATION_CONFIGS[kind]
    real = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.bfloat16)
    fake = meta_bf16(case_of("llama_gqa"))
    fake_mode = FakeTensorMode()
    materialize(fake, fake_mode)
    quantize(fake, fake_mode, QUANTIZATION_CONFIGS[kind])

    def parts(model: torch.nn.Module) -> dict[str, tuple[str, tuple[int, ...], torch.dtype]]:
        found = {}
        for name, tensor in model.state_dict().items():
            subclass = is_traceable_wrapper_subclass(tensor)
            for part in tensor.__tensor_flatten__()[0] if subclass else [""]:
                t = getattr(tensor, part) if subclass else tensor
                found[f"{name}.{part}"] = (type(tensor).__name__ if subclass else "plain", tuple(t.shape), t.dtype)
        return found

    held, loaded = parts(fake), parts(real)
    assert held == loaded
    quantized = {name.rsplit(".", 1)[0] for name, (kind_, _, _) in loaded.items() if kind_ != "plain"}
    assert len(quantized) == 14, quantized  # 2 layers x (q, k, v, o, gate, up, down); lm_head and embeddings as stored


def test_float8_row_of_a_model_transformers_cannot_quantize_to_fp8_says_why(tmp_path: Path) -> None:
    """gpt-oss's experts carry biases, which transformers' FP8Experts asserts against: the float8 row is null with
    transformers' own reason, not an internal error, and the other rows still answer."""
    from estimator import estimate

    config = _tiny_gpt_oss_config()
    config.pop("quantization_config")
    (tmp_path / "config.json").write_text(json.dumps(config))
    result = estimate(str(tmp_path), dtypes=["float8", "bfloat16"])
    fp8, bf16 = result.row("float8"), result.row("bfloat16")
    assert fp8.total_bytes is None and bf16.total_bytes is not None and bf16.total_bytes > 0
    assert any(n.startswith("float8: transformers' FineGrainedFP8Config cannot quantize this model (FP8Experts does not "
                            "support bias") for n in fp8.notes), fp8.notes


def test_a_simulation_leaves_compressed_tensors_ranges_real(tmp_path: Path) -> None:
    """compressed-tensors caches its quantization ranges as tensors: one made on the fakes must not reach a later real
    run in the same process (the app's, a test worker's), which torch would refuse."""
    from compressed_tensors.quantization import QuantizationArgs
    from compressed_tensors.quantization.utils.helpers import calculate_range
    from torch._subclasses.fake_tensor import FakeTensor

    from estimator import estimate
    from testkit.prequant_truth import QUANTIZATION_CONFIGS

    (tmp_path / "config.json").write_text(json.dumps({**_SMALL_LLAMA, "quantization_config": QUANTIZATION_CONFIGS["ct_w4a16"]}))
    row = estimate(str(tmp_path), dtypes=["bfloat16"], mode="inference", device="cpu", seq_len=16, max_new_tokens=2).rows[0]
    assert row.peak_bytes
    low, high = calculate_range(QuantizationArgs(num_bits=4, type="int", symmetric=True), "cpu")
    assert not isinstance(low, FakeTensor) and not isinstance(high, FakeTensor)
