"""Tensor-parallel inference per rank: the simulation (transformers' TP plan applied on fake
tensors) against an independent per-rank count written here from Llama's published plan
(``LlamaConfig.base_model_tp_plan``: q/k/v/gate/up column-wise, o/down row-wise; the embedding
row-wise over the vocabulary, the head column-wise with its output gathered), with the rows of a
split dimension divided as ``torch.chunk`` divides them (rank 0 the larger part)."""

from __future__ import annotations

import pytest
import torch
import transformers

from estimator.errors import BadOptionError
from estimator.options import ParallelSpec, Strategy, parse_options
from estimator.peak.parallel.simulate import simulate_parallel

CONFIG = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
              vocab_size=1000, max_position_embeddings=256)
COLWISE = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")
ROWWISE = ("o_proj", "down_proj")


def build() -> torch.nn.Module:
    with torch.device("meta"):
        return transformers.LlamaForCausalLM._from_config(transformers.LlamaConfig(**CONFIG), dtype=torch.float32)


def rank0_rows(n: int, ranks: int) -> int:
    return -(-n // ranks)


def expected_weights(model: torch.nn.Module, ranks: int) -> int:
    total = 0
    for name, p in model.named_parameters():
        leaf = name.rsplit(".", 2)[-2]
        if leaf in COLWISE or name in ("lm_head.weight", "model.embed_tokens.weight"):  # split along dim 0
            total += rank0_rows(p.shape[0], ranks) * p.shape[1] * p.element_size()
        elif leaf in ROWWISE:  # split along dim 1
            total += p.shape[0] * rank0_rows(p.shape[1], ranks) * p.element_size()
        else:  # norms: replicated
            total += p.numel() * p.element_size()
    return total + sum(b.numel() * b.element_size() for b in model.buffers())


@pytest.mark.parametrize("ranks", [2, 4])  # kv heads 2: 4 ranks do not divide them (refused below), 2 do
def test_tp_rank_holds_its_slices(ranks: int) -> None:
    model = build()
    weights = expected_weights(model, ranks)
    batch, seq = 2, 64
    if CONFIG["num_key_value_heads"] % ranks:
        with pytest.raises(ValueError, match="does not divide"):
            simulate_parallel(model, ParallelSpec(gpus=ranks, strategy=Strategy.TP), mode="inference", device="cpu",
                              batch_size=batch, seq_len=seq)
        return
    found = simulate_parallel(model, ParallelSpec(gpus=ranks, strategy=Strategy.TP), mode="inference", device="cpu",
                              batch_size=batch, seq_len=seq).peak
    head_dim = CONFIG["hidden_size"] // CONFIG["num_attention_heads"]
    kv = CONFIG["num_hidden_layers"] * 2 * batch * (CONFIG["num_key_value_heads"] // ranks) * seq * head_dim * 4
    assert found.components["weights"] == weights
    assert found.components["kv_cache"] == kv
    single = simulate_parallel(build(), ParallelSpec(gpus=1, strategy=Strategy.TP), mode="inference", device="cpu",
                               batch_size=batch, seq_len=seq).peak
    assert found.components["activations"] < single.components["activations"]  # heads and MLP slices are split


def test_tp_rank_against_transformers_tp_under_torchrun(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """transformers' own ``from_pretrained(tp_plan="auto")`` on 2 gloo ranks (CPU, ~20 s): each
    rank's local weight shards, buffers and KV cache, counted on the real tensors, equal the
    simulation's to the byte."""
    from testkit import tp_truth

    tp_truth.save_tiny_llama(str(tmp_path))
    measured = tp_truth.run(str(tmp_path), nproc=2)
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM._from_config(transformers.LlamaConfig(**tp_truth.TINY_LLAMA), dtype=torch.float32)
    found = simulate_parallel(model, ParallelSpec(gpus=2, strategy=Strategy.TP), mode="inference", device="cpu",
                              batch_size=tp_truth.BATCH, seq_len=tp_truth.SEQ).peak
    for rank in measured:
        assert found.components["weights"] == rank["weights"]
        assert found.components["kv_cache"] == rank["kv_cache"]


def test_strategy_refusals() -> None:
    with pytest.raises(BadOptionError, match="needs --strategy") as exc:
        parse_options(mode="training", gpus=8)
    assert exc.value.option == "strategy"
    with pytest.raises(BadOptionError, match="inference only"):
        parse_options(mode="training", gpus=8, strategy="tp")
    with pytest.raises(BadOptionError, match="training strategy"):
        parse_options(mode="inference", gpus=8, strategy="zero3")
    with pytest.raises(BadOptionError, match="optimizer\\+params needs"):
        parse_options(mode="training", gpus=8, strategy="zero2", offload="optimizer+params")
    with pytest.raises(BadOptionError, match="ZeRO's"):
        parse_options(mode="training", gpus=8, strategy="fsdp", offload="optimizer")
    with pytest.raises(BadOptionError, match="load figures"):
        parse_options(mode="load", gpus=8, strategy="fsdp")
    with pytest.raises(BadOptionError, match="must be one of"):
        parse_options(mode="training", gpus=8, strategy="megatron")
    options = parse_options(mode="training", gpus=8, nodes=2, strategy="zero3", offload="optimizer")
    assert options.parallel.world_size == 16
    assert options.shaping(None)["strategy"] == "zero3" and options.shaping(None)["offload"] == "optimizer"
