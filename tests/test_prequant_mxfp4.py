"""MXFP4 (gpt-oss) checkpoints on CUDA (:mod:`estimator.peak.sim.prequant_mxfp4`): triton_kernels' ``matmul_ogs`` is
CUDA only, so what transformers' ``Mxfp4GptOssMLP`` holds and the kernel allocates is modelled from the published
source (huggingface/kernels-community ``gpt-oss-triton-kernels``); these tests pin each size to that source's formula
by hand counts (no GPU here: the peaks are modelled, not measured, and the rows say so). The CPU path (dequantized at
load) is measured against the allocator in tests/test_prequant_inference.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from testkit.hub_process import REPO_ROOT

# experts 4 of hidden 64, intermediate 64, two layers (testkit.prequant_truth's gpt_oss case, as a config)
_TINY = {"model_type": "gpt_oss", "architectures": ["GptOssForCausalLM"], "hidden_size": 64, "intermediate_size": 64,
         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
         "num_local_experts": 4, "num_experts_per_tok": 2, "vocab_size": 1000, "max_position_embeddings": 256,
         "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}, "torch_dtype": "bfloat16",
         "quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": [
             "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}}


def _cli(folder: Path, *args: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "estimator", str(folder), "--mode", "inference", "--batch-size", "2",
                           "--seq-len", "64", "--max-new-tokens", "32", "--format", "json", "--dtypes", "bfloat16", *args],
                          capture_output=True, text=True, cwd=REPO_ROOT, timeout=600)
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout)["rows"]
    return dict(row)


def test_cuda_row_holds_the_experts_as_stored(tmp_path: Path) -> None:
    """The CUDA row's weights: the unquantized build's, with each layer's experts replaced by what
    Mxfp4GptOssExperts keeps: uint8 blocks (E x 2I x H/2, E x H x I/2), uint8 scales (one per 32 values) and float32
    biases (E x 2I, E x H)."""
    (tmp_path / "config.json").write_text(json.dumps(_TINY))
    row = _cli(tmp_path, "--device", "cuda")
    e, h, i, layers = 4, 64, 64, 2
    plain_experts = e * h * 2 * i * 2 + e * 2 * i * 2 + e * i * h * 2 + e * h * 2  # bfloat16 weights and biases
    packed = e * 2 * i * h // 2 + e * 2 * i * h // 32 + e * 2 * i * 4 + e * h * i // 2 + e * h * i // 32 + e * h * 4
    assert row["method"] == "simulated" and row["peak_bytes"] == sum(row["components"].values())
    assert row["components"]["weights"] == row["total_bytes"] - layers * (plain_experts - packed)
    assert row["weights_held"] == "mxfp4 experts as stored; triton_kernels matmul_ogs (modelled from its source)"
    assert any("modelled, not measured" in n and "init_allocation" in n for n in row["notes"]), row["notes"]


@pytest.mark.parametrize(("m", "n", "k", "experts", "expected"), [
    (4, 5760, 2880, 32, 4),  # gpt-oss-20b decode, gate_up: block_m 16, grid 1 x 23, 108 // 23 = 4, (2880/128) // 4 = 5
    (4, 2880, 2880, 32, 5),  # its down: grid 1 x 12, 108 // 12 = 9, capped at 5 by K
    (8192, 5760, 2880, 32, 1),  # a 2,048-token prefill: block_m 128, grid 64 x 23 > 108 SMs
    (64, 128, 64, 4, 1),  # the tiny case: K / 128 rounds to one block, // 4 = 0 -> 1
])
def test_split_k_follows_make_default_opt_flags_nvidia(m: int, n: int, k: int, experts: int, expected: int) -> None:
    from estimator.peak.sim.prequant_mxfp4 import split_k

    assert split_k(m, n, k, experts) == expected


def test_call_buffers_follow_init_allocation() -> None:
    """gate_up (gathered, fused SwiGLU halves N) and down (scattered to T rows): init_allocation's shapes."""
    from estimator.peak.sim.prequant_mxfp4 import call_buffers

    # decode of gpt-oss-20b (T 1, top-4): split-k on both calls, float32 scratchpads of the unreduced N
    assert call_buffers(4, 5760, 2880, 32, top_k=4, scatter=False, reduction_n=2) == ((1, 4, 2880), (4, 1, 4, 5760), 0)
    assert call_buffers(4, 2880, 2880, 32, top_k=4, scatter=True) == ((1, 1, 2880), (5, 1, 4, 2880), 0)
    # prefill of 2,048 tokens: no split-k; the down call's fused scatter keeps its scratch rows in the output and
    # makes writeback_idxs (M) and finalize_scatter_idxs (T + M + 1)
    assert call_buffers(8192, 5760, 2880, 32, top_k=4, scatter=False, reduction_n=2) == ((1, 8192, 2880), None, 0)
    assert call_buffers(8192, 2880, 2880, 32, top_k=4, scatter=True) == ((1, 8192 + 2048, 2880), None, 8192 + 2048 + 8192 + 1)
    # top-1: no finalize, the scatter writes the T rows directly (writeback_idxs is the routing's dst_indx)
    assert call_buffers(2048, 2880, 2880, 32, top_k=1, scatter=True) == ((1, 2048, 2880), None, 0)


@pytest.mark.parametrize("tokens", [1, 128])
def test_one_moe_layer_allocates_what_the_source_does(tokens: int) -> None:
    """One Mxfp4GptOssMLP call past its router (E 32, top-4, H = I = 2880, gpt-oss-20b's), counted by the tracker:
    the routing's gate scales and int32 indices, gate_up's output and down's, and the float32 split-k scratchpads
    while their call runs (the router's linear runs as torch runs it, before)."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from transformers import AutoConfig

    from estimator.peak.sim.materialize import materialize
    from estimator.peak.sim.prequant_mxfp4 import Mxfp4MLP, routing_held_elements, split_k
    from estimator.peak.sim.tracker import StorageTracker

    config = AutoConfig.for_model("gpt_oss", hidden_size=2880, intermediate_size=2880, num_local_experts=32,
                                  num_experts_per_tok=4, num_hidden_layers=1, layer_types=None)
    with torch.device("meta"):
        router = torch.nn.Linear(2880, 32, dtype=torch.bfloat16)
    mlp = Mxfp4MLP(router, config)
    fake = FakeTensorMode()
    materialize(mlp, fake)
    with fake:
        x = torch.empty((tokens, 2880), dtype=torch.bfloat16)
        logits = torch.empty((tokens, 32), dtype=torch.bfloat16)
        out, _ = mlp(x[None])
    assert out.shape == (1, tokens, 2880)
    with fake, StorageTracker() as tracker:
        out = mlp.routed(x, logits)
        peak = tracker.snapshot().peak_bytes
    assert out.shape == (tokens, 2880)
    gates = tokens * 4
    scaled, indices = routing_held_elements(tokens, 4, 32)
    assert scaled == gates and indices == 2 * gates + 5 * 512 + 4 * 512  # pad512(33) and pad512(max_n_tiles)
    held = scaled * 2 + indices * 4
    s1, s2 = split_k(gates, 5760, 2880, 32), split_k(gates, 2880, 2880, 32)
    gate_up = gates * 2880 * 2
    at_gate_up = held + gate_up + (s1 * gates * 5760 * 4 if s1 > 1 else 0)
    down = tokens * 2880 * 2 + s2 * gates * 2880 * 4 if s2 > 1 else (gates + tokens) * 2880 * 2 + (2 * gates + tokens + 1) * 4
    assert peak == max(at_gate_up, held + gate_up + down)
