"""Serving rows (``mode="serving"``): one vLLM-style plan per dtype on one GPU.

For each float32 / float16 / bfloat16 row: the model is built on meta in that dtype, vLLM's profile
run is modelled from vLLM's kernels (:mod:`estimator.serving.activations`, per rank: :mod:`estimator.serving.ranks`),
the KV layout is read from the config
(:mod:`estimator.serving.kv`) and the plan made (:mod:`estimator.serving.plan`). The row's
``peak_bytes`` is what vLLM holds at its busiest: the weights, the profile run's peak above them
(``activations``) and the KV-cache blocks it allocates (``kv_cache``); the plan itself is the row's
``serving`` object (docs/CONTRACT.md).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from estimator.errors import BadOptionError, Option, UnsupportedError
from estimator.options import DType, KVCacheDType, Library
from estimator.result import Row
from estimator.serving.scheme import vllm_scheme
from estimator.source.limits import position_field
from estimator.source.stored import ROW_ITEMSIZE  # the bytes of a float row's values

if TYPE_CHECKING:
    from estimator.fit.gpus import GPU
    from estimator.options import LoadSpec, ServingSpec, WorkSpec
    from estimator.serving.activations import ProfileEstimate
    from estimator.serving.plan import ServingPlan
    from estimator.source.resolve import Resolved

logger = logging.getLogger(__name__)

def serving_rows(resolved: Resolved, load: LoadSpec, work: WorkSpec, gpu: GPU) -> tuple[Row, ...]:
    """One row per dtype with the plan of serving ``resolved`` with vLLM on ``gpu`` (its ``total_bytes``:
    what the driver reports, vLLM's ``total_memory``; ``--gpu-memory`` makes one of the size given)."""
    from estimator.load.rows import build, built_rows
    from estimator.peak.inputs.generic import detect_kind
    from estimator.peak.workload import ModelKind
    from estimator.serving.plan import batch_defaults
    from estimator.serving.ranks import stage_plans

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
    stated = next((part.get("num_hidden_layers") for part in (resolved.config.get("text_config") or {}, resolved.config)
                   if isinstance(part, dict) and isinstance(part.get("num_hidden_layers"), int)), None)
    if stated is not None and serving.pipeline_parallel_size > stated:  # before any build (ranks.py checks built models too)
        raise BadOptionError([Option("pipeline_parallel_size"), f" {serving.pipeline_parallel_size} is more than the model's "
                              f"{stated} layers."], model_id=resolved.name)
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
        built_config: Any = model.config
        image_text = (getattr(built_config, "vision_config", None) is not None and not built_config.is_encoder_decoder
                      and type(model).__name__.endswith("ForConditionalGeneration"))  # image-text-to-text (Gemma-3, LLaVA)
        if detect_kind(model) is not ModelKind.CAUSAL_LM and not image_text:
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
        try:
            stages = stage_plans(model, config, dtype, kv_bytes, serving, capacity, max_model_len=max_model_len,
                                  max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens, gpu_name=gpu_name)
        except UnsupportedError as exc:  # an architecture whose layers are not read: no plan, said why
            rows.append(replace(load_row, notes=(*load_row.notes, f"{dtype.value}: no serving plan ({exc}); peak_bytes is null")))
            continue
        limiting = min(range(len(stages)), key=lambda s: stages[s][0].blocks.num_blocks)
        result, profile = stages[limiting]
        components = {"weights": result.weights_bytes, "activations": result.profile_peak_bytes,
                      "kv_cache": result.blocks.cache_bytes}
        served = result.to_dict()
        scheme, scheme_note = vllm_scheme(config, serving.quantization.value, gpu.compute_capability)  # estimator.serving.scheme
        served.update(tensor_parallel_size=serving.tensor_parallel_size, pipeline_parallel_size=serving.pipeline_parallel_size,
                      vllm_version=serving.vllm_version.value, quantization=_quant_name(config, serving), vllm_quantization=scheme,
                      limiting_stage=limiting, profile_phase=profile.phase,
                      ranks=[_rank_dict(stage, plan_s, prof) for stage, (plan_s, prof) in enumerate(stages)])
        speed, speed_note = _speed(model, config, dtype, kv_bytes, serving, result, gpu, scheme, max_model_len=max_model_len,
                                   max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens)
        rows.append(replace(
            load_row,
            peak_bytes=sum(components.values()),
            components=components,
            method="simulated",
            serving=served,
            speed=speed,
            notes=(*load_row.notes, scheme_note, *_notes(result, gpu_name, serving.kv_cache_dtype, profile, serving, limiting), *result.notes,
                   *((speed_note,) if speed_note else ())),
        ))
    return tuple(rows)


def _speed(model: Any, config: Any, dtype: DType, kv_bytes: int, serving: ServingSpec, result: ServingPlan, gpu: GPU, scheme: str, *,
           max_model_len: int, max_num_seqs: int, max_num_batched_tokens: int) -> tuple[dict[str, Any] | None, str | None]:
    """vLLM's decode throughput at the plan's concurrency and its time to first token on ``gpu`` where the hardware table
    knows it (``--gpu-memory`` alone has no bandwidth: no speed, no note); docs/speed.md "vLLM serving"."""
    from estimator.serving.kv import kv_layout
    from estimator.speed.hardware import find_hardware
    from estimator.speed.vllm_speed import NotModelled, serving_speed

    try:
        hardware = find_hardware(gpu.name)
    except BadOptionError:
        return None, None
    if scheme != "none":
        return None, f"no speed: vLLM's {scheme} kernels (quantized weights) are not modelled yet"
    if serving.kv_cache_dtype is KVCacheDType.FP8:
        return None, "no speed: an fp8 KV cache's attention kernels are not modelled yet"
    tp, pp = serving.tensor_parallel_size, serving.pipeline_parallel_size
    blocks = result.blocks
    concurrency = min(max_num_seqs, int(blocks.max_concurrency)) if blocks.blocks_per_request else 0
    try:
        layout = kv_layout(config, dtype_bytes=kv_bytes, tp=tp, model_bytes=ROW_ITEMSIZE[dtype])
        return serving_speed(model, layout, hardware, concurrency=concurrency, max_model_len=max_model_len, max_num_seqs=max_num_seqs,
                             max_num_batched_tokens=max_num_batched_tokens, act_bytes=ROW_ITEMSIZE[dtype], tp=tp, pp=pp,
                             dtype=dtype.value)
    except (NotModelled, UnsupportedError) as exc:
        return None, f"no speed: {exc}"


def _quant_name(config: Any, serving: ServingSpec) -> str:
    qc = getattr(config, "quantization_config", None)
    if qc is not None:
        method = qc.get("quant_method") if isinstance(qc, dict) else getattr(qc, "quant_method", None)
        return str(getattr(method, "value", method))
    return serving.quantization.value


def _rank_dict(stage: int, p: ServingPlan, prof: ProfileEstimate) -> dict[str, Any]:
    return {"stage": stage, "weights_bytes": p.weights_bytes, "profile_peak_bytes": p.profile_peak_bytes,
            "non_torch_bytes": p.non_torch_bytes, "available_kv_cache_bytes": p.available_kv_bytes,
            "num_blocks": p.blocks.num_blocks, "forward_bytes": prof.forward_bytes, "sampler_bytes": prof.sampler_bytes,
            "encoder_bytes": prof.encoder_bytes, "compile_bytes": prof.compile_bytes,
            "kept_bytes": dict(prof.kept_bytes)}


def _notes(p: ServingPlan, gpu_name: str | None, kv_dtype: KVCacheDType, prof: ProfileEstimate, serving: ServingSpec,
           limiting: int) -> tuple[str, ...]:
    b = p.blocks
    gpu = f"{gpu_name} " if gpu_name else ""
    tp, pp = serving.tensor_parallel_size, serving.pipeline_parallel_size
    where = ""
    if tp > 1 or pp > 1:
        where = (f"per rank of tensor_parallel_size {tp} x pipeline_parallel_size {pp}"
                 + (f"; pipeline stage {limiting} holds the fewest blocks, and vLLM sizes every stage's cache by it" if pp > 1 else "")
                 + " (serving.ranks has each stage): ")
    kept = ", ".join(f"{k} {v:,}" for k, v in prof.kept_bytes.items())
    from estimator.serving.versions import rules_for
    non_torch_terms = rules_for(serving.vllm_version.value).non_torch_terms(tp, pp)
    return (
        f"serving (vLLM {serving.vllm_version.value}): {where}{gpu}{p.capacity_bytes:,} bytes x gpu_memory_utilization "
        f"{p.gpu_memory_utilization:g} = {p.requested_bytes:,} bytes for vLLM",
        f"KV cache budget: {p.requested_bytes:,} - weights {p.weights_bytes:,} - profile-run peak {p.profile_peak_bytes:,} "
        f"- non-torch {p.non_torch_bytes:,} = {p.available_kv_bytes:,} bytes (CUDA graphs are captured after the KV cache "
        f"is allocated, in the other {1 - p.gpu_memory_utilization:.0%}, unless VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1)",
        f"profile run (vLLM's profile_run, its kernels per layer): {p.max_num_batched_tokens:,} tokens in "
        f"{min(p.max_num_seqs, p.max_num_batched_tokens):,} requests; busiest decoder layer {prof.forward_bytes:,} bytes, "
        f"sampler phase {prof.sampler_bytes:,} bytes, "
        + (f"encoder run (images at once, as vLLM's multimodal profiling) {prof.encoder_bytes:,} bytes, " if prof.encoder_bytes else "")
        + (f"the cold torch.compile's benchmark of the embedding gather (a random copy of the embedding table and the "
           f"kernel's outputs) {prof.compile_bytes:,} bytes, " if prof.compile_bytes else "")
        + f"kept {kept}: peak above the weights {p.profile_peak_bytes:,} "
        f"(the {prof.phase} phase)",
        f"non-torch memory {p.non_torch_bytes:,} bytes per rank ("
        + ", ".join(f"{k} {v:,}" for k, v in non_torch_terms.items())
        + "): the first forward's cuBLAS handles and lazily loaded kernels, NCCL's buffers connected at the first "
        "all-reduce under tensor parallelism (from three GPUs also its NVLS buffers); published H100 measurements and "
        "NCCL's NVLS buffer size (docs/serving.md)",
        f"KV cache ({kv_dtype.value}, {p.kv_bytes_per_token:,} bytes per token): {b.num_blocks:,} blocks of {b.block_size} tokens "
        f"({b.page_bytes * b.group_size:,} bytes each, {len(b.groups)} group(s) of {b.group_size} layers), "
        f"{b.cache_bytes:,} bytes; {b.tokens:,} tokens",
        *_state_notes(p),
        f"maximum concurrency for {b.max_model_len:,} tokens per request: {b.max_concurrency:.2f}x "
        f"({b.blocks_per_request:,} blocks per request); max_num_seqs {p.max_num_seqs:,}, max_num_batched_tokens "
        f"{p.max_num_batched_tokens:,}",
        "not in peak_bytes: the CUDA context, non-torch memory, allocator rounding and CUDA graphs (outside vLLM's share)",
    )


def _state_notes(p: ServingPlan) -> tuple[str, ...]:
    """What the recurrent layers' state takes (vLLM 0.19's MambaSpec blocks, docs/serving.md "Hybrid and SSM models")."""
    b = p.blocks
    if not p.state_layers:
        return ()
    pad = (b.page_bytes - b.state_page_bytes) / b.state_page_bytes
    state = (f"recurrent state: {p.state_layers} layer(s) keep {p.conv_state_bytes + p.ssm_state_bytes:,} bytes per request "
             f"(conv {p.conv_state_bytes:,} + SSM {p.ssm_state_bytes:,}, the model's dtype), one block per request in each of "
             f"{b.state_blocks_per_request} recurrent group(s) (prefix caching off, vLLM's default for hybrid models)")
    if b.state_blocks_per_request == len(b.groups):  # recurrent layers only
        return (state + f"; a page is one layer's state ({b.page_bytes:,} bytes), a block of max_model_len tokens "
                f"(vLLM's mamba_block_size), so vLLM's token count is blocks x max_model_len",)
    raised = (f"vLLM raised the attention block size from {b.requested_block_size} to {b.block_size} tokens so that a page "
              if b.block_size > b.requested_block_size else f"at block size {b.block_size} ")
    return (state + f"; {raised}({b.page_bytes:,} bytes) holds a layer's state ({b.state_page_bytes:,} bytes, padded by "
            f"{pad:.2%}); concurrency counts both: attention blocks for max_model_len plus the state blocks",)

