"""The speed answers of transformers rows (estimator/speed/transformers_speed.py): ``rows[].speed`` with ``--gpu``.

Consistency: every figure of the answer is ``phase_time`` of the costs traced in the row's own simulation, and those
costs equal a direct trace of the same model. Truth: the training step's model FLOPs equal
``torch.utils.flop_counter``'s count of the real small model's step on CPU (eager attention); a decode step's bytes
are the real model's weights + its cache's keys and values read + the cache's ``torch.cat`` copy + a small remainder
of activations; the decode step derived at another context equals the one traced there. Nothing is timed.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode
from transformers import AutoModelForCausalLM, DynamicCache, GPT2Config, LlamaConfig

from estimator import estimate
from estimator.speed.cost import Phase
from estimator.speed.hardware import find_hardware
from estimator.speed.roofline import phase_time
from estimator.speed.trace import decode_context, phase_costs_for
from estimator.speed.transformers_speed import RowCosts, answer_on, decode_at, kv_ops, short_speed

GPT2 = GPT2Config(n_embd=128, n_layer=2, n_head=4, vocab_size=512, n_positions=512)
LLAMA = LlamaConfig(hidden_size=256, intermediate_size=1024, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, vocab_size=4096, max_position_embeddings=512)


@pytest.fixture
def model_dir(tmp_path: Path) -> str:
    (tmp_path / "config.json").write_text(json.dumps({**LLAMA.to_dict(), "architectures": ["LlamaForCausalLM"]}))
    return str(tmp_path)


def _meta(dtype: torch.dtype) -> torch.nn.Module:
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(copy.deepcopy(LLAMA), dtype=dtype)


def _real(dtype: torch.dtype = torch.float32, config: Any = LLAMA) -> torch.nn.Module:
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(copy.deepcopy(config), dtype=dtype, attn_implementation="eager")


def _ids(batch: int, n: int) -> torch.Tensor:
    return torch.randint(0, LLAMA.vocab_size, (batch, n), generator=torch.Generator().manual_seed(0))


def test_inference_figures_are_phase_time_of_the_traced_costs(model_dir: str) -> None:
    """TTFT, prefill and decode tokens/s in the JSON are ``phase_time`` of the costs of the row's own simulation
    (launch not hidden: eager PyTorch), and those costs are a direct trace's; the csv gets speed_* columns."""
    result = estimate(model_dir, mode="inference", dtypes=["bfloat16"], seq_len=64, max_new_tokens=16, gpu="RTX 4090")
    row = result.rows[0]
    speed, costs = row.to_dict()["speed"], row.speed_costs.costs
    hw = find_hardware("RTX 4090")
    prefill = phase_time(costs[Phase.PREFILL], hw, launch_hidden=False)
    decode = phase_time(costs[Phase.DECODE], hw, launch_hidden=False)
    assert speed["label"] == "roofline" and speed["engine"] == "transformers" and speed["hardware"] == "RTX 4090"
    assert speed["time_to_first_token_s"] == round(prefill.seconds, 6)
    assert speed["prefill_tokens_per_second"] == round(64 / prefill.seconds, 1)
    assert speed["decode_tokens_per_second"] == round(1 / decode.seconds, 1)
    assert decode.launch_seconds > 0  # batch-1 eager decode: the launch floor binds on the small kernels
    assert speed["decode_flops_per_token"] == costs[Phase.DECODE].flops
    assert speed["decode_bytes_per_token"] == costs[Phase.DECODE].bytes_moved
    assert speed["bandwidth_bytes_s"] == decode.bandwidth_bytes_s and speed["peak_flops"] == prefill.peak_flops
    assert speed["decode_context"] == decode_context(64, 16)
    start = phase_time(decode_at(costs[Phase.DECODE], decode_context(64, 16), 64), hw, launch_hidden=False)
    assert speed["decode_tokens_per_second_at_start"] == round(1 / start.seconds, 1) >= speed["decode_tokens_per_second"]  # launch-bound at this size
    assert any(n.startswith("speed on RTX 4090 (transformers, roofline)") for n in row.notes)
    _, direct = phase_costs_for(_meta(torch.bfloat16), seq_len=64, max_new_tokens=16, extrapolate_layers=False)
    assert {p: (c.flops, c.bytes_moved, c.kernels) for p, c in costs.items()} == \
        {p: (c.flops, c.bytes_moved, c.kernels) for p, c in direct.items()}
    assert short_speed(speed).startswith("~") and "TTFT" in short_speed(speed)


def test_decode_derived_at_another_context_equals_the_step_traced_there() -> None:
    """The decode step derived at the start of the generation (context 64) from the one traced at its end (79):
    FLOPs equal the step traced at 64, exactly; bytes within 0.5 % (the attention's query and output, one token's,
    are scaled with its keys and values)."""
    _, end = phase_costs_for(_meta(torch.bfloat16), seq_len=64, max_new_tokens=16)
    _, start = phase_costs_for(_meta(torch.bfloat16), seq_len=64, max_new_tokens=1)
    derived = decode_at(end[Phase.DECODE], decode_context(64, 16), 64)
    traced = start[Phase.DECODE]
    assert len(kv_ops(end[Phase.DECODE])) == 3 * LLAMA.num_hidden_layers  # per layer: the keys' and values' cat, the attention
    assert derived.flops == traced.flops
    assert derived.kernels == traced.kernels
    assert abs(derived.bytes_moved - traced.bytes_moved) < 0.005 * traced.bytes_moved


def test_decode_bytes_are_weights_kv_and_cache_copy(model_dir: str) -> None:
    """bytes a decode token = the weights read (every parameter but the input embedding table, read one row) + the KV
    read by the attention (the real cache's keys and values, and the query) + the cache's ``torch.cat`` copy (the old
    cache read, the new one written) + activations, under 5 % at this size."""
    context = 63
    result = estimate(model_dir, mode="inference", dtypes=["bfloat16"], seq_len=context, max_new_tokens=1, gpu="H100 SXM")
    speed = result.rows[0].speed
    real = _real(torch.bfloat16).eval()
    cache = DynamicCache(config=LLAMA)
    with torch.no_grad():
        real(input_ids=_ids(1, context), past_key_values=cache, use_cache=True, logits_to_keep=1)
        real(input_ids=_ids(1, 1), past_key_values=cache, use_cache=True)
    kv = sum(layer.keys.nbytes + layer.values.nbytes for layer in cache.layers)  # context + 1 positions
    query = LLAMA.num_hidden_layers * LLAMA.hidden_size * 2  # one token's query, bfloat16
    assert speed["decode_kv_bytes_per_token"] == kv + query
    assert speed["decode_cache_copy_bytes_per_token"] == 2 * kv  # cat reads the old cache and the new token, writes all
    embed = real.get_input_embeddings().weight
    weights = sum(p.nbytes for p in real.parameters()) - embed.nbytes + embed.shape[1] * embed.element_size()
    other = speed["decode_other_bytes_per_token"]
    assert 0 < other - weights < 0.05 * speed["decode_bytes_per_token"]
    assert speed["decode_bytes_per_token"] == speed["decode_kv_bytes_per_token"] + speed["decode_cache_copy_bytes_per_token"] + other


def _real_step_flops(config: Any) -> int:
    real = _real(config=config)
    real.train()
    opt = torch.optim.AdamW(real.parameters())
    ids = torch.randint(0, config.vocab_size, (2, 24), generator=torch.Generator().manual_seed(0))
    with FlopCounterMode(display=False) as counter:
        real(input_ids=ids, labels=ids).loss.backward()
        opt.step()
    return counter.get_total_flops()


@pytest.mark.parametrize(("family", "dtype", "checkpointing", "fused"), [
    ("llama", "float32", False, 0), ("llama", "bfloat16", False, 0), ("llama", "bfloat16", True, 0), ("gpt2", "float32", False, 2)])
def test_training_model_flops_equal_flop_counter(tmp_path: Path, family: str, dtype: str, checkpointing: bool, fused: int) -> None:
    """The answer's model FLOPs a step = FlopCounterMode's count of the real step on CPU (eager attention, no
    checkpointing): a fused attention backward's recompute (GPT-2 in float32: CUDA's memory-efficient kernel, as
    PyTorch chooses) and gradient checkpointing's replayed forward are the hardware's work, counted in the step's
    FLOPs and time but not the model's; step time and tokens/s are the phases' ``phase_time``."""
    config, arch = (LLAMA, "LlamaForCausalLM") if family == "llama" else (GPT2, "GPT2LMHeadModel")
    (tmp_path / "config.json").write_text(json.dumps({**config.to_dict(), "architectures": [arch]}))
    result = estimate(str(tmp_path), mode="training", dtypes=[dtype], batch_size=2, seq_len=24, gpu="A100 80GB",
                      gradient_checkpointing=checkpointing)
    row = result.rows[0]
    speed, costs = row.speed, row.speed_costs.costs
    assert speed["model_flops_per_step"] == _real_step_flops(config)
    assert len([op for op in costs[Phase.BACKWARD].ops if "attention" in op.name]) == fused
    if checkpointing or fused:
        assert speed["step_flops"] > speed["model_flops_per_step"]  # the replay / recompute is the step's work
    hw = find_hardware("A100 80GB")
    step = sum(phase_time(costs[p], hw, launch_hidden=False).seconds for p in (Phase.TRAIN_FORWARD, Phase.BACKWARD, Phase.OPTIMIZER))
    assert speed["step_s"] == round(step, 6)
    assert speed["train_tokens_per_second"] == round(48 / step, 1)
    assert speed["model_flops_utilization"] == round(speed["model_flops_per_step"] / step / speed["stated_peak_flops"], 4)


def test_no_speed_without_a_named_gpu(model_dir: str) -> None:
    """No ``--gpu``, or ``--gpu-memory`` alone (a capacity has no bandwidth): no ``speed`` key."""
    for kwargs in ({}, {"gpu_memory": "24GB"}):
        result = estimate(model_dir, mode="inference", dtypes=["bfloat16"], seq_len=16, max_new_tokens=2, **kwargs)
        assert "speed" not in result.rows[0].to_dict()
        assert result.rows[0].speed_costs is None


def test_hardware_without_a_peak_for_the_dtype_says_why(model_dir: str) -> None:
    """A V100 has no bfloat16 units: the bfloat16 row has no speed and a note saying why and what to ask instead;
    the float16 row has one; the kept costs give the bfloat16 speed on a GPU that has them."""
    result = estimate(model_dir, mode="inference", dtypes=["float16", "bfloat16"], seq_len=16, max_new_tokens=2, gpu="V100 32GB")
    f16, bf16 = result.rows
    assert f16.speed is not None and bf16.speed is None
    assert any("no speed: V100 32GB has no bfloat16 units" in n and "float16" in n for n in bf16.notes)
    answer, _ = answer_on(bf16.speed_costs, find_hardware("RTX 4090"))
    assert answer is not None and answer["decode_tokens_per_second"] > 0
    assert isinstance(bf16.speed_costs, RowCosts)


def test_csv_has_the_speed_columns(model_dir: str) -> None:
    result = estimate(model_dir, mode="inference", dtypes=["bfloat16"], seq_len=16, max_new_tokens=2, gpu="L4")
    frame = result.to_dataframe()
    assert frame["speed_decode_tokens_per_second"][0] == result.rows[0].speed["decode_tokens_per_second"]
    assert frame["speed_label"][0] == "roofline"


def test_sweep_rows_carry_the_speed_columns(model_dir: str) -> None:
    """The sweep's dataset gets the speed answer's figures (appended columns, null where the answer has none)."""
    from estimator_sweep.grid import Grid, Scenario
    from estimator_sweep.rows import COLUMNS, error_rows, estimate_rows, schema

    result = estimate(model_dir, mode="inference", dtypes=["bfloat16"], seq_len=16, max_new_tokens=2, gpu="L4")
    grid, scenario = Grid(modes=("inference",), gpus=("L4",)), Scenario(mode="inference", seq_len=16, max_new_tokens=2, gpu="L4")
    row = estimate_rows(result, reference=model_dir, grid=grid, scenario=scenario, task="t", seconds=1.0)[0]
    speed = result.rows[0].speed
    assert row["speed_label"] == "roofline"
    assert row["decode_tokens_per_second"] == speed["decode_tokens_per_second"]
    assert row["time_to_first_token_s"] == speed["time_to_first_token_s"]
    assert row["train_tokens_per_second"] is None and row["model_flops_utilization"] is None
    failed = error_rows("x", "bug", reference="r", model=None, revision=None, source=None, grid=grid, scenario=scenario,
                        dtypes=("bfloat16",), task="t", seconds=0.0)[0]
    assert set(failed) == set(row) == {name for name, _, _ in COLUMNS}
    assert failed["decode_tokens_per_second"] is None
    assert schema().field("decode_tokens_per_second").nullable
