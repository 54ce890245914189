"""Serving rows (``mode="serving"``): one vLLM-style plan per dtype on one GPU.

For each float32 / float16 / bfloat16 row: the model is built on meta in that dtype, vLLM's profile
run is simulated (:mod:`estimator.serving.profile`), the KV layout is read from the config
(:mod:`estimator.serving.kv`) and the plan made (:mod:`estimator.serving.plan`). The row's
``peak_bytes`` is what vLLM holds at its busiest: the weights, the profile run's peak above them
(``activations``) and the KV-cache blocks it allocates (``kv_cache``); the plan itself is the row's
``serving`` object (docs/CONTRACT.md).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING

from estimator.errors import BadOptionError, Option, UnsupportedError
from estimator.options import DType, KVCacheDType, Library
from estimator.result import Row
from estimator.source.limits import position_field
from estimator.source.stored import ROW_ITEMSIZE  # the bytes of a float row's values

if TYPE_CHECKING:
    from estimator.fit.gpus import GPU
    from estimator.options import LoadSpec, WorkSpec
    from estimator.serving.plan import ServingPlan
    from estimator.source.resolve import Resolved

logger = logging.getLogger(__name__)

def serving_rows(resolved: Resolved, load: LoadSpec, work: WorkSpec, gpu: GPU) -> tuple[Row, ...]:
    """One row per dtype with the plan of serving ``resolved`` with vLLM on ``gpu`` (its ``total_bytes``:
    what the driver reports, vLLM's ``total_memory``; ``--gpu-memory`` makes one of the size given)."""
    from estimator.load.rows import build, built_rows
    from estimator.peak.inputs import ModelKind, detect_kind
    from estimator.peak.rows import simulation_lock
    from estimator.serving.kv import kv_layout
    from estimator.serving.plan import batch_defaults, plan
    from estimator.serving.profile import profile_run

    if resolved.library is not Library.TRANSFORMERS:
        raise UnsupportedError([Option("mode"), f" serving plans transformers decoders; {resolved.name} is a "
                                f"{resolved.library.value} model."], model_id=resolved.name)
    capacity, gpu_name = gpu.total_bytes, gpu.name
    serving = work.serving
    tokens_default, seqs_default = batch_defaults(capacity, gpu_name)
    max_num_batched_tokens = serving.max_num_batched_tokens or tokens_default
    max_num_seqs = serving.max_num_seqs or seqs_default
    if max_num_seqs > max_num_batched_tokens:  # vLLM's SchedulerConfig refuses it too
        raise BadOptionError([Option("max_num_batched_tokens"), f" ({max_num_batched_tokens:,}) must be at least ",
                              Option("max_num_seqs"), f" ({max_num_seqs:,})."])
    rows = []
    for load_row in built_rows(resolved, load):
        dtype = DType.parse(load_row.dtype, option="dtypes")
        if dtype is DType.BFLOAT16 and gpu.native_bf16 is False:  # vLLM's _check_if_gpu_supports_dtype
            rows.append(replace(load_row, notes=(*load_row.notes, f"bfloat16: vLLM refuses bfloat16 on the {gpu.name} (compute "
                                                  f"capability {gpu.compute_capability}; it needs 8.0): serve it in float16 "
                                                  "(--dtypes float16); peak_bytes is null")))
            continue
        if dtype not in ROW_ITEMSIZE:
            rows.append(replace(load_row, notes=(*load_row.notes, f"{dtype.value}: serving is planned for float32, float16 and "
                                                  "bfloat16 weights (vLLM's --dtype); peak_bytes is null")))
            continue
        model = build(resolved, dtype, trust_remote_code=load.trust_remote_code)
        if detect_kind(model) is not ModelKind.CAUSAL_LM:
            raise UnsupportedError([Option("mode"), f" serving plans text generation; {resolved.name} is not a causal "
                                    "language model."], model_id=resolved.name)
        config = model.config
        field, limit = position_field(resolved.config) or ("max_position_embeddings", None)
        max_model_len = serving.max_model_len or limit
        if max_model_len is None:
            raise BadOptionError([f"{resolved.name}'s config gives no max_position_embeddings: give ", Option("max_model_len"), "."],
                                 model_id=resolved.name, option="max_model_len")
        if limit is not None and max_model_len > limit:
            raise BadOptionError([Option("max_model_len"), f" {max_model_len:,} is more than {resolved.name}'s "
                                  f"{field} ({limit:,}); vLLM refuses it too."], model_id=resolved.name)
        kv_bytes = 1 if serving.kv_cache_dtype is KVCacheDType.FP8 else ROW_ITEMSIZE[dtype]
        layout = kv_layout(config, dtype_bytes=kv_bytes)
        try:
            with simulation_lock():
                profile = profile_run(model, max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs)
        except Exception as exc:  # the model's code could not run on fake tensors: no plan, said why
            logger.warning("profile run failed for %s: %s", resolved.name, exc, exc_info=True)
            rows.append(replace(load_row, notes=(*load_row.notes, f"{dtype.value}: vLLM's profile run could not be simulated "
                                                  f"({type(exc).__name__}: {exc}); no serving plan, peak_bytes is null")))
            continue
        result = plan(layout, capacity_bytes=capacity, weights_bytes=profile.weights_bytes, profile_peak_bytes=profile.above_weights,
                      max_model_len=max_model_len, max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                      gpu_memory_utilization=serving.gpu_memory_utilization, block_size=serving.block_size)
        components = {"weights": profile.weights_bytes, "activations": profile.above_weights, "kv_cache": result.blocks.cache_bytes}
        rows.append(replace(
            load_row,
            peak_bytes=sum(components.values()),
            components=components,
            method="simulated",
            serving=result.to_dict(),
            notes=(*load_row.notes, *_notes(result, gpu_name, serving.kv_cache_dtype), *profile.notes, *result.notes),
        ))
    return tuple(rows)


def _notes(p: ServingPlan, gpu_name: str | None, kv_dtype: KVCacheDType) -> tuple[str, ...]:
    b = p.blocks
    gpu = f"{gpu_name} " if gpu_name else ""
    return (
        f"serving (vLLM V1): {gpu}{p.capacity_bytes:,} bytes x gpu_memory_utilization {p.gpu_memory_utilization:g} = "
        f"{p.requested_bytes:,} bytes for vLLM",
        f"KV cache budget: {p.requested_bytes:,} - weights {p.weights_bytes:,} - profile-run peak {p.profile_peak_bytes:,} "
        f"- CUDA graphs {p.cuda_graph_bytes:,} - non-torch {p.non_torch_bytes:,} = {p.available_kv_bytes:,} bytes "
        "(CUDA graphs: vLLM captures them after allocating the KV cache, in the other "
        f"{1 - p.gpu_memory_utilization:.0%}, unless VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1; non-torch memory "
        "(NCCL, driver allocations during the profile run) is not measured here)",
        f"KV cache ({kv_dtype.value}, {p.kv_bytes_per_token:,} bytes per token): {b.num_blocks:,} blocks of {b.block_size} tokens "
        f"({b.page_bytes * b.group_size:,} bytes each, {len(b.groups)} group(s) of {b.group_size} layers), "
        f"{b.cache_bytes:,} bytes; {b.tokens:,} tokens",
        f"maximum concurrency for {b.max_model_len:,} tokens per request: {b.max_concurrency:.2f}x "
        f"({b.blocks_per_request:,} blocks per request); max_num_seqs {p.max_num_seqs:,}, max_num_batched_tokens "
        f"{p.max_num_batched_tokens:,}",
        "not in peak_bytes: the CUDA context, allocator rounding and CUDA graphs (outside vLLM's share)",
    )
