"""The per-op cost trace (estimator/speed/trace.py) against independent counts of real small models on CPU.

FLOPs: ``torch.utils.flop_counter.FlopCounterMode`` around the real model's training step, prefill and
decode step (real tensors, eager attention, whose two matmuls flop_counter counts with its own ``bmm``
formula), against the trace of the same model simulated on fake tensors with SDPA (CUDA's fused
flash / memory-efficient kernels, or PyTorch's CPU flash kernel, counted by the SDPA formulas).
Bytes of a decode step: the real model's own tensors (its parameters, the cache ``generate`` holds).
Nothing here times anything.
"""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode
from transformers import AutoModelForCausalLM, DynamicCache, GPT2Config, LlamaConfig, Qwen2Config, Qwen3MoeConfig

from estimator.peak import simulate_peak
from estimator.speed.cost import Phase
from estimator.speed.op_cost import op_cost
from estimator.speed.trace import CostTrace, TraceError, decode_context, phase_costs_for

LLAMA = LlamaConfig(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, vocab_size=512, max_position_embeddings=512)
QWEN2 = Qwen2Config(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, vocab_size=512, max_position_embeddings=512, tie_word_embeddings=True)
GPT2 = GPT2Config(n_embd=128, n_layer=2, n_head=4, vocab_size=512, n_positions=512)
DECODE = LlamaConfig(hidden_size=256, intermediate_size=1024, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, vocab_size=4096, max_position_embeddings=512)
CONFIGS = {"llama": LLAMA, "qwen2": QWEN2, "gpt2": GPT2}


def _meta(config: Any, dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(copy.deepcopy(config), dtype=dtype)
    assert model.config._attn_implementation == "sdpa"
    return model


def _real(config: Any, dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    torch.manual_seed(0)  # a copy: from_config sets the attention implementation on the config it is given
    return AutoModelForCausalLM.from_config(copy.deepcopy(config), dtype=dtype, attn_implementation="eager")


def _ids(batch: int, n: int) -> torch.Tensor:
    return torch.randint(0, 512, (batch, n), generator=torch.Generator().manual_seed(0))


FUSED_BACKWARDS = {("llama", "cpu"): 2, ("llama", "cuda"): 0, ("gpt2", "cpu"): 0, ("gpt2", "cuda"): 2}


@pytest.mark.parametrize("device", ["cuda", "cpu"])
@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_training_step_flops_equal_flop_counter(family: str, device: str) -> None:
    """FLOPs of forward + loss + backward + AdamW step = FlopCounterMode's count of the real step, exactly, but
    for one difference: a fused attention kernel's backward (CPU flash; CUDA's memory-efficient kernel, which
    float32 without GQA gets) recomputes the scores ``q @ k^T``, which flop_counter's SDPA backward formula
    counts (5 matmuls) and the real eager run does not (4: it kept the scores). So the trace has one
    ``2 * b * h * s * s * d`` more per fused backward, and none where CUDA's math path runs (float32 with GQA).
    The optimizer phase counts 0, as flop_counter does: AdamW is element-wise, and flop_counter has formulas
    for matmuls, convolutions and attention only."""
    config, batch, n = CONFIGS[family], 2, 24
    real = _real(config)
    real.train()
    opt = torch.optim.AdamW(real.parameters())
    ids = _ids(batch, n)
    with FlopCounterMode(display=False) as counter:
        real(input_ids=ids, labels=ids).loss.backward()
        opt.step()
    _, costs = phase_costs_for(_meta(config), mode="training", device=device, batch_size=batch, seq_len=n)
    assert set(costs) == {Phase.TRAIN_FORWARD, Phase.BACKWARD, Phase.OPTIMIZER}
    assert costs[Phase.OPTIMIZER].flops == 0
    assert costs[Phase.OPTIMIZER].bytes_moved > 0
    fused = [op for op in costs[Phase.BACKWARD].ops if "attention" in op.name]
    # PyTorch's choices: CPU flash for Llama (GPT-2's mask sends CPU to the math path); on CUDA the memory-efficient
    # kernel for GPT-2 and the math path for Llama (GQA in float32)
    assert len(fused) == FUSED_BACKWARDS[family, device]
    heads, head_dim = config.num_attention_heads, config.hidden_size // config.num_attention_heads
    recompute = len(fused) * 2 * batch * heads * n * n * head_dim
    assert sum(c.flops for c in costs.values()) == counter.get_total_flops() + recompute


@pytest.mark.parametrize("device", ["cuda", "cpu"])
@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_prefill_flops_equal_flop_counter(family: str, device: str) -> None:
    """The prompt's forward as generate runs it (a cache, logits of the last position only)."""
    config, batch, n = CONFIGS[family], 2, 40
    real = _real(config).eval()
    ids = _ids(batch, n)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        real(input_ids=ids, past_key_values=DynamicCache(config=config), use_cache=True, logits_to_keep=1)
    _, costs = phase_costs_for(_meta(config), device=device, batch_size=batch, seq_len=n)
    assert costs[Phase.PREFILL].flops == counter.get_total_flops()
    assert costs[Phase.PREFILL].tokens == batch * n


def _real_decode(config: Any, batch: int, context: int) -> tuple[int, torch.nn.Module, DynamicCache]:
    """FlopCounterMode's count of the real bfloat16 model's decode step with ``context`` positions in the cache,
    the model and the cache after the step."""
    real = _real(config, torch.bfloat16).eval()
    cache = DynamicCache(config=config)
    with torch.no_grad():
        real(input_ids=_ids(batch, context), past_key_values=cache, use_cache=True, logits_to_keep=1)
        with FlopCounterMode(display=False) as counter:
            real(input_ids=_ids(batch, 1), past_key_values=cache, use_cache=True)
    return counter.get_total_flops(), real, cache


@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_decode_step_flops_and_bytes_against_the_real_model(device: str) -> None:
    """One decode token: FLOPs = FlopCounterMode's; bytes = the weights read (every parameter, the input
    embedding table by the rows looked up) + the KV cache the attention reads (from the real cache), plus
    what transformers' DynamicCache.update copies (``torch.cat``: the old cache read, the new one written)
    and the activations: one token's hidden states through each kernel, here (hidden size 256, 2 layers)
    under 5% of the total; for Llama-3.1-8B 0.17% (docs/speed_trace.md). bfloat16, so that CUDA's
    flash kernel is the one simulated (in float32 with GQA CUDA falls back to the math path, which
    expands the cache to the query heads: counted as it runs)."""
    config, batch, context = DECODE, 1, 63
    flops, real, cache = _real_decode(config, batch, context)
    _, costs = phase_costs_for(_meta(config, torch.bfloat16), device=device, batch_size=1, seq_len=context, max_new_tokens=1)
    decode = costs[Phase.DECODE]
    assert decode_context(context, 1) == context
    assert decode.flops == flops
    assert decode.tokens == batch

    params = {p.untyped_storage()._cdata: p.nbytes for p in real.parameters()}
    embed = real.get_input_embeddings().weight
    weights = sum(params.values()) - embed.nbytes + batch * embed.shape[1] * embed.element_size()
    kv = sum(layer.keys.nbytes + layer.values.nbytes for layer in cache.layers)  # context + 1 positions
    kv_before = kv * context // (context + 1)
    cat_copy = kv_before + kv  # DynamicLayer.update: torch.cat reads the old keys/values and writes the new ones
    counted = decode.bytes_moved
    activations = counted - weights - kv - cat_copy
    assert counted > weights + kv
    assert 0 < activations < 0.05 * counted, (counted, weights, kv, cat_copy)


def test_moe_grouped_experts_against_the_real_model() -> None:
    """Qwen3-MoE with transformers' default experts implementation (``_grouped_mm``, our formula: flop_counter has
    none) against the real model with the eager experts loop (one ``mm`` per expert reached, flop_counter's): the
    prefill's and the decode step's FLOPs are equal; at batch-1 decode the grouped matmuls read the top-k experts'
    weights of each layer, not all of them (the real model's expert parameters, times k / E)."""
    config = Qwen3MoeConfig(hidden_size=128, intermediate_size=256, moe_intermediate_size=64, num_hidden_layers=2,
                            num_attention_heads=4, num_key_value_heads=2, vocab_size=512, num_experts=8,
                            num_experts_per_tok=2, max_position_embeddings=512)
    torch.manual_seed(0)
    real = AutoModelForCausalLM.from_config(copy.deepcopy(config), dtype=torch.bfloat16, attn_implementation="eager",
                                            experts_implementation="eager").eval()
    cache, n = DynamicCache(config=config), 16
    with torch.no_grad():
        with FlopCounterMode(display=False) as prefill:
            real(input_ids=_ids(1, n), past_key_values=cache, use_cache=True, logits_to_keep=1)
        with FlopCounterMode(display=False) as decode:
            real(input_ids=_ids(1, 1), past_key_values=cache, use_cache=True)
    _, costs = phase_costs_for(_meta(config, torch.bfloat16), seq_len=n, max_new_tokens=1)
    assert costs[Phase.PREFILL].flops == prefill.get_total_flops()
    assert costs[Phase.DECODE].flops == decode.get_total_flops()
    grouped = [op for op in costs[Phase.DECODE].ops if "grouped_mm" in op.name]
    assert grouped and all(op.formula == "grouped_mm" for op in grouped)
    experts = sum(p.nbytes for name, p in real.named_parameters() if ".experts." in name)
    rows = config.num_experts_per_tok  # one token, its top-k experts
    inputs = sum(rows * op_in for op_in in (config.hidden_size * 2, config.moe_intermediate_size * 2))  # bf16 rows
    offsets = len(grouped) * config.num_experts * 4  # int32 offsets per expert
    read = sum(op.bytes_read for op in grouped)
    assert read == experts * rows // config.num_experts + config.num_hidden_layers * inputs + offsets


@pytest.mark.parametrize("mode", ["training", "inference"])
def test_extrapolated_costs_equal_the_whole_model(mode: str) -> None:
    """A decoder with alike layers is simulated with 2, 3 and 4 layers: its costs extrapolated to 7 layers are
    those of the whole 6-layer model, op for op (the foreach optimizer's ops, one call over every layer's
    tensors, by their bytes extrapolated)."""
    config = LlamaConfig(**{**LLAMA.to_dict(), "num_hidden_layers": 6})
    kw: dict[str, Any] = {"mode": mode, "seq_len": 8, "max_new_tokens": 3 if mode == "inference" else 0}
    _, sampled = phase_costs_for(_meta(config, torch.bfloat16), extrapolate_layers=True, **kw)
    _, whole = phase_costs_for(_meta(config, torch.bfloat16), extrapolate_layers=False, **kw)
    assert set(sampled) == set(whole)
    for phase in whole:
        assert Counter(sampled[phase].ops) == Counter(whole[phase].ops), phase


@pytest.mark.parametrize("mode", ["training", "inference"])
def test_counting_leaves_the_memory_simulation_unchanged(mode: str) -> None:
    """The trace runs in the memory simulation's own pass and changes none of its figures (the fused attention's
    backward marker is a view), CUDA's allocator replay included."""
    plain = simulate_peak(_meta(LLAMA, torch.bfloat16), mode=mode, seq_len=32, max_new_tokens=2, extrapolate_layers=False)  # type: ignore[arg-type]
    counted, costs = phase_costs_for(_meta(LLAMA, torch.bfloat16), mode=mode, seq_len=32, max_new_tokens=2,
                                     extrapolate_layers=False)
    assert counted == plain
    assert costs


def test_views_are_not_kernels_and_in_place_ops_write_once() -> None:
    x = torch.zeros(4, 8)
    assert op_cost(torch.ops.aten.view.default, (x, [32]), {}, x.view(32)) is None
    assert op_cost(torch.ops.aten.t.default, (x,), {}, x.t()) is None
    added = op_cost(torch.ops.aten.add_.Tensor, (x, x), {}, x)
    assert added is not None and (added.bytes_read, added.bytes_written) == (128, 128)
    copied = op_cost(torch.ops.aten.copy_.default, (x, torch.ones(4, 8)), {}, x)
    assert copied is not None and (copied.bytes_read, copied.bytes_written) == (128, 128)  # the source only
    table, index = torch.zeros(1000, 8), torch.tensor([3])
    looked_up = op_cost(torch.ops.aten.embedding.default, (table, index), {}, table[index])
    assert looked_up is not None and looked_up.bytes_read == 32 + 8  # one row and the index
    expanded = torch.zeros(1, 8).expand(4, 8)
    mm = op_cost(torch.ops.aten.mm.default, (expanded, torch.zeros(8, 2)), {}, torch.zeros(4, 2))
    assert mm is not None and mm.flops == 2 * 4 * 8 * 2 and mm.bytes_read == 32 + 64 and mm.formula == "flop_counter"


def test_no_costs_where_nothing_was_simulated() -> None:
    trace = CostTrace(_meta(LLAMA))
    with pytest.raises(TraceError):
        trace.phase_costs()


def test_an_estimate_row_with_its_costs(tmp_path: Any) -> None:
    """The row path (options -> resolve -> simulate_row with the trace) gives the memory result the row gets and
    the costs of the same model simulated directly."""
    import json

    from estimator.options import DType, Library, parse_options
    from estimator.peak.rows import simulate_row
    from estimator.source.reference import parse_reference
    from estimator.source.resolve import resolve
    from estimator.speed.row_costs import simulate_row_with_costs

    (tmp_path / "config.json").write_text(json.dumps({**LLAMA.to_dict(), "architectures": ["LlamaForCausalLM"]}))
    resolved = resolve(parse_reference(str(tmp_path)), Library.AUTO)
    options = parse_options(dtypes=["bfloat16"], mode="inference", seq_len=16, max_new_tokens=2)
    result, costs = simulate_row_with_costs(resolved, options.load, options.work, options.hardware, DType.BFLOAT16)
    assert result == simulate_row(resolved, options.load, options.work, options.hardware, DType.BFLOAT16)
    _, direct = phase_costs_for(_meta(LLAMA, torch.bfloat16), seq_len=16, max_new_tokens=2)
    assert {p: (c.flops, c.bytes_moved, c.kernels) for p, c in costs.items()} == \
        {p: (c.flops, c.bytes_moved, c.kernels) for p, c in direct.items()}
    assert costs[Phase.PREFILL].tokens == 16 and costs[Phase.DECODE].tokens == 1


def test_qlora_4bit_matmuls_count_as_the_dense_ones() -> None:
    """QLoRA's base layers are bitsandbytes' ``gemm_4bit`` (one op reading the packed weight; flop_counter has no
    formula for it): the forward's FLOPs equal those of the same LoRA forward on the unquantized model, whose
    matmuls flop_counter counts. (The backwards differ by what the recipes do differently:
    ``prepare_model_for_kbit_training`` keeps the norms in float32, so the attention takes CUDA's math path, and
    makes the embeddings' output require a gradient.)"""
    from estimator.peak.sim.training import Recipe

    kw: dict[str, Any] = {"optimizer": "adamw", "autocast_dtype": torch.bfloat16, "gradient_checkpointing": True,
                          "lora_rank": 8}
    _, qlora = phase_costs_for(_meta(LLAMA, torch.bfloat16), mode="training", seq_len=16, recipe=Recipe(**kw, kbit=True))
    _, lora = phase_costs_for(_meta(LLAMA, torch.bfloat16), mode="training", seq_len=16, recipe=Recipe(**kw))
    assert qlora[Phase.TRAIN_FORWARD].flops == lora[Phase.TRAIN_FORWARD].flops
    packed = [op for op in qlora[Phase.TRAIN_FORWARD].ops if op.formula == "gemm_4bit"]
    assert len(packed) == 7 * LLAMA.num_hidden_layers  # q, k, v, o, gate, up, down (lm_head stays dense)
    # each reads its input rows (16 tokens x in_features, bfloat16), the packed weight (half a byte a value) and
    # the float32 absmax of each block of 64 values: the 4-bit weight, not a dequantized copy
    layers = [m for name, m in _meta(LLAMA, torch.bfloat16).named_modules() if ".layers." in name and name.endswith("proj")]
    assert sum(op.bytes_read for op in packed) == sum(m.weight.numel() // 2 + m.weight.numel() // 64 * 4 + 16 * m.in_features * 2
                                                      for m in layers)


def test_a_count_that_fails_leaves_the_memory_result(monkeypatch: pytest.MonkeyPatch) -> None:
    """An op whose cost cannot be counted makes ``phase_costs`` raise, naming it; the simulation itself is untouched."""
    import estimator.speed.trace as trace_module

    def broken(func: Any, *_: Any) -> None:
        raise ValueError("no formula")

    monkeypatch.setattr(trace_module, "op_cost", broken)
    trace = CostTrace(_meta(LLAMA))
    result = simulate_peak(_meta(LLAMA), mode="inference", seq_len=8, observe=trace.observe)
    assert result.method == "simulated"
    with pytest.raises(TraceError, match="no formula"):
        trace.phase_costs()


def test_a_scatter_touches_its_target_where_the_values_go() -> None:
    cache, values, index = torch.zeros(1, 2, 100, 8), torch.ones(1, 2, 1, 8), torch.tensor([5])
    put = op_cost(torch.ops.aten.index_copy_.default, (cache, 2, index, values), {}, cache)
    assert put is not None and (put.bytes_read, put.bytes_written) == (64 + 8 + 64, 64)


def test_no_costs_where_a_formula_stood_in(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the step cannot run on fakes the memory answer is a formula, and there are no per-op costs to give."""
    import estimator.peak.engine as engine

    def fails(*_: Any, **__: Any) -> None:
        raise RuntimeError("cannot run on fakes")

    monkeypatch.setattr(engine, "simulate_step", fails)
    with pytest.raises(TraceError, match="formula"):
        phase_costs_for(_meta(LLAMA), seq_len=8, extrapolate_layers=False)
