"""ZeRO model states per GPU against DeepSpeed's own estimator functions.

For six published configs (the bundled catalog's real config.json files) the parameter counts are
taken from the model built on the meta device, counted DeepSpeed's way (``model_to_params``: the
distinct parameters, and the largest module's own direct parameters), then
:func:`estimator.peak.parallel.zero.zero_model_states` must return exactly what
``estimate_zero2_model_states_mem_needs`` and ``estimate_zero3_model_states_mem_needs`` return,
GPU and CPU bytes, for 1, 2, 8 and 64 GPUs, offload on and off.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
import torch

from estimator.peak.parallel.zero import zero_model_states

pytest.importorskip("deepspeed", reason="deepspeed==0.19.8 is in requirements-dev.txt")

CATALOG = Path(__file__).resolve().parents[1] / "estimator" / "source" / "catalog" / "data"
CONFIGS = (
    "meta-llama__Llama-3.1-8B",
    "meta-llama__Llama-3.1-70B",
    "meta-llama__Llama-3.1-405B",
    "Qwen__Qwen2.5-7B",
    "mistralai__Mixtral-8x7B-v0.1",
    "google__gemma-7b",
)
LAYOUTS = ((1, 1), (2, 1), (8, 1), (8, 8))  # (gpus per node, nodes): N = 1, 2, 8, 64


@functools.cache
def deepspeed_counts(name: str) -> tuple[int, int]:
    """(total_params, largest_layer_params) as DeepSpeed's ``model_to_params`` counts them, on a
    meta build (its own function deduplicates by ``data_ptr``, which meta tensors do not have, so
    the same rule is applied by tensor identity)."""
    import transformers

    config = transformers.AutoConfig.for_model(**json.loads((CATALOG / name / "config.json").read_text()))
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    total = sum({id(p): p.numel() for p in model.parameters()}.values())
    largest = max(sum(p.numel() for p in m.parameters(recurse=False)) for m in model.modules())
    return total, largest


@pytest.mark.parametrize("name", CONFIGS)
def test_zero2_equals_deepspeed(name: str) -> None:
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    total, _ = deepspeed_counts(name)
    for per_node, nodes in LAYOUTS:
        for offload in (False, True):
            cpu, gpu = estimate_zero2_model_states_mem_needs(total, per_node, nodes, cpu_offload=offload)
            ours = zero_model_states("zero2", total, gpus_per_node=per_node, nodes=nodes,
                                     offload="optimizer" if offload else "none")
            assert (ours.gpu_bytes, ours.cpu_bytes) == (gpu, cpu), (name, per_node, nodes, offload)


@pytest.mark.parametrize("name", CONFIGS)
def test_zero3_equals_deepspeed(name: str) -> None:
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs

    total, largest = deepspeed_counts(name)
    for per_node, nodes in LAYOUTS:
        for offload, offload_params in ((False, False), (True, False), (True, True)):
            cpu, gpu, live = estimate_zero3_model_states_mem_needs(
                total, largest, per_node, nodes, cpu_offload=offload, cpu_offload_params=offload_params)
            mode = "optimizer+params" if offload_params else "optimizer" if offload else "none"
            ours = zero_model_states("zero3", total, gpus_per_node=per_node, nodes=nodes, offload=mode,
                                     largest_layer_params=largest)
            assert (ours.gpu_bytes, ours.cpu_bytes) == (gpu, cpu), (name, per_node, nodes, mode)
            assert live == 4 * largest


def test_partitioning_shrinks_with_stage() -> None:
    """The ZeRO paper's ordering at N = 8: DDP > stage 1 > stage 2 > stage 3 (model states per GPU)."""
    p = 7_000_000_000
    per_gpu = [zero_model_states(s, p, gpus_per_node=8, largest_layer_params=200_000_000).gpu_bytes  # type: ignore[arg-type]
               for s in ("ddp", "zero1", "zero2", "zero3")]
    assert per_gpu == sorted(per_gpu, reverse=True) and len(set(per_gpu)) == 4
    # Paper, Figure 1 (K = 12, plus DeepSpeed's float32 gradients): DDP = 2 + 2 + 16 bytes per parameter
    assert per_gpu[0] == 20 * p


def test_refusals() -> None:
    with pytest.raises(ValueError, match="no offload"):
        zero_model_states("ddp", 10, offload="optimizer")
    with pytest.raises(ValueError, match="ZeRO-3 only"):
        zero_model_states("zero2", 10, offload="optimizer+params")


@pytest.mark.parametrize("strategy,offload", [("zero2", "optimizer"), ("zero3", "none"), ("zero3", "optimizer")])
def test_zero_rows_carry_deepspeeds_model_states(strategy: str, offload: str) -> None:
    """A bfloat16 (mixed-precision) ZeRO row of a small Llama: its model states on the GPU (weights
    without buffers, gradients, optimizer states) and its cpu_bytes are what DeepSpeed's own
    estimators return for the model's parameter count (and, for ZeRO-3, our live block)."""
    import transformers
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    from estimator.options import Offload, ParallelSpec, Strategy
    from estimator.peak.parallel.simulate import simulate_parallel
    from estimator.peak.sim.training import Recipe

    config = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, vocab_size=1000, max_position_embeddings=256)
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM._from_config(config, dtype=torch.float32)
    params = sum(p.numel() for p in model.parameters())
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())
    block = sum(p.numel() for p in model.model.layers[0].parameters())
    spec = ParallelSpec(gpus=4, strategy=Strategy(strategy), offload=Offload(offload))
    found = simulate_parallel(model, spec, mode="training", device="cuda", batch_size=1, seq_len=32,
                              recipe=Recipe(autocast_dtype=torch.bfloat16))
    comps = found.peak.components
    gpu_states = comps["weights"] - buffers + comps.get("gradients", 0) + comps.get("optimizer_states", 0)
    if strategy == "zero2":
        cpu, gpu = estimate_zero2_model_states_mem_needs(params, 4, 1, cpu_offload=offload != "none")
    else:
        cpu, gpu, _ = estimate_zero3_model_states_mem_needs(params, block, 4, 1, cpu_offload=offload != "none",
                                                            cpu_offload_params=False)
    assert gpu_states == gpu
    assert found.cpu_bytes == (cpu if offload != "none" else None)
    assert comps.get("activations", 0) > 0  # the local micro-batch's, from the simulated step
