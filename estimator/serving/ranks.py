"""One plan per pipeline stage of a vLLM server: each rank's weights, profile run, non-torch memory and KV blocks.

vLLM's engine asks every worker for its available memory and gives every worker the same number of
blocks, the smallest any of them can hold (``get_kv_cache_configs``); the ranks of one pipeline stage are
alike (tensor parallelism splits every matrix and KV head evenly), so one rank per stage is planned.
"""

from __future__ import annotations

from typing import Any

from estimator.errors import BadOptionError, Option
from estimator.options import DType, ServingSpec
from estimator.serving.activations import ProfileEstimate
from estimator.serving.plan import ServingPlan
from estimator.source.stored import ROW_ITEMSIZE

__all__ = ["stage_plans"]


def stage_plans(model: Any, config: Any, dtype: DType, kv_bytes: int, serving: ServingSpec, capacity: int, *,
                 max_model_len: int, max_num_seqs: int, max_num_batched_tokens: int,
                 gpu_name: str | None = None) -> list[tuple[ServingPlan, ProfileEstimate]]:
    """One plan per pipeline stage (one tensor-parallel rank of it; the ranks of a stage are alike) on the GPU called
    ``gpu_name`` (its multiprocessors size the sampler's Triton buffer: :mod:`estimator.serving.sms`)."""
    from estimator.serving.activations import profile_peak
    from estimator.serving.kv import kv_layout
    from estimator.serving.plan import plan
    from estimator.serving.shapes import model_shape
    from estimator.serving.sms import sm_count
    from estimator.serving.versions import rules_for
    from estimator.serving.weights import pp_layers, quant_of, rank_weights

    tp, pp = serving.tensor_parallel_size, serving.pipeline_parallel_size
    rules = rules_for(serving.vllm_version.value)
    act = ROW_ITEMSIZE[dtype]
    quant = quant_of(config, serving.quantization.value)
    shape = model_shape(model)
    if pp > len(shape.layers):
        raise BadOptionError([Option("pipeline_parallel_size"), f" {pp} is more than the model's {len(shape.layers)} layers."])
    weights = rank_weights(model, act_bytes=act, quant=quant, tp=tp, pp=pp)
    non_torch = rules.non_torch(tp, pp)
    requests = min(max_num_seqs, max_num_batched_tokens)
    out = []
    for stage, layers in enumerate(pp_layers(len(shape.layers), pp)):
        prof = profile_peak(shape, rules=rules, act_bytes=act, tokens=max_num_batched_tokens, requests=requests, tp=tp,
                            layers=layers, first=stage == 0, last=stage == pp - 1, mxfp4_experts=quant.method == "mxfp4",
                            sms=sm_count(gpu_name))
        layout = kv_layout(config, dtype_bytes=kv_bytes, layers=layers, tp=tp, model_bytes=act)
        result = plan(layout, capacity_bytes=capacity, weights_bytes=weights[stage], profile_peak_bytes=prof.peak_increase,
                      max_model_len=max_model_len, max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                      gpu_memory_utilization=serving.gpu_memory_utilization, block_size=serving.block_size,
                      non_torch_bytes=non_torch, cuda_graph_bytes=0)
        out.append((result, prof))
    return out
