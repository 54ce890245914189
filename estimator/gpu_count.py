"""``count_gpus()``: how many GPUs of one kind a model needs for a use, per dtype, over :func:`estimator.estimate`.

Each count of GPUs tried is one per-GPU estimate by the core (:mod:`estimator.fit.count` says which
counts, in which order, and why the answer is the fewest): training under a strategy (``fsdp``,
``zero1``-``zero3``, ``ddp``; 1 GPU is the single-GPU step) simulated by ``estimator.peak.parallel``;
inference under tensor parallelism (the core's strategy ``tp``, within one node); serving with
vLLM's tensor parallelism within a node, then pipeline stages of whole nodes (``estimator.serving``'s
per-rank plan, whose verdict is vLLM's: one request of max model length fits). The estimates are
the core's, cached as any other, so the single-GPU answer a page has just shown costs nothing here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from estimator.api import estimate
from estimator.errors import BadOptionError, InputError, Option, UnsupportedError
from estimator.fit.count import DDP_NOTE, MAX_GPUS, GPUCount, Trial, counts, fewest_gpus, layout
from estimator.fit.gpus import custom_gpu, find_gpu
from estimator.messages import CLI, Wording
from estimator.options import Mode, Strategy
from estimator.result import Estimate, Row

__all__ = ["USES", "count_gpus", "count_text"]

USES = (Mode.TRAINING.value, Mode.INFERENCE.value, Mode.SERVING.value)
HEAD_KEYS = ("num_attention_heads", "n_head", "n_heads", "num_heads", "decoder_attention_heads")  # transformers' attribute_map names
TRAINING_STRATEGIES = tuple(s.value for s in Strategy if s is not Strategy.TP)


def count_gpus(model: Any, *, mode: str = "training", strategy: str | None = None, gpu: str | None = None, gpu_memory: Any = None,
               max_gpus: int = MAX_GPUS, wording: Wording = CLI, **options: Any) -> dict[str, GPUCount]:
    """Per dtype row, the fewest GPUs of ``gpu`` (or ``gpu_memory``) that fit ``model`` in ``mode``.

    ``strategy`` (training only; default ``fsdp``) spreads the step; ``options`` are
    :func:`estimator.estimate`'s (dtypes, batch_size, seq_len, lora_rank...; not gpus, nodes,
    tensor_parallel_size or pipeline_parallel_size, which this varies). A count the core refuses
    (tensor parallel sizes that do not divide the heads, say) is a trial without a figure, its
    reason worded by ``wording``. Raises what :func:`estimator.estimate` raises for the request itself.
    """
    if mode not in USES:
        raise BadOptionError([Option("mode"), f" {mode!r}: how many GPUs is answered for training, inference and serving."], option="mode")
    if mode != Mode.TRAINING.value and strategy not in (None, "", "none", "tp"):
        raise BadOptionError([Option("strategy"), f" {strategy} is a training strategy; inference and serving are split by tensor parallelism."],
                             option="strategy")
    chosen = (strategy if strategy not in (None, "", "none") else Strategy.FSDP.value) if mode == Mode.TRAINING.value else "tp"
    if mode == Mode.TRAINING.value and chosen not in TRAINING_STRATEGIES:
        raise BadOptionError([Option("strategy"), f" {chosen!r}: choose one of {', '.join(TRAINING_STRATEGIES)}."], option="strategy")
    for name in ("gpus", "nodes", "tensor_parallel_size", "pipeline_parallel_size"):
        if options.get(name) not in (None, 1):
            raise BadOptionError([Option(name), " is what counting GPUs varies; leave it at 1."], option=name)
        options.pop(name, None)
    hardware = custom_gpu(gpu_memory) if gpu_memory not in (None, "") else find_gpu(gpu) if gpu else None
    if hardware is None:
        raise BadOptionError([Option("gpu"), " counting GPUs needs the kind of GPU: name it with ", Option("gpu"), " or give its memory with ",
                              Option("gpu_memory"), "."], option="gpu")
    tried = counts(max_gpus)
    if chosen == Strategy.DDP.value:
        tried = tuple(n for n in tried if n <= 2)
    elif mode == Mode.INFERENCE.value:
        tried = tuple(n for n in tried if n <= layout(n)[0])  # the core's tp is simulated within one node

    answers: dict[int, Estimate | InputError] = {}
    heads = _attention_heads(model, options) if mode == Mode.SERVING.value else None

    def at(n: int) -> Estimate | InputError:
        if n not in answers:
            spread: dict[str, Any] = {}
            gpus_per_node, nodes = layout(n)
            if n > 1 and mode == Mode.SERVING.value:
                tp, pp = serving_layout(n, heads)
                spread = {"tensor_parallel_size": tp, "pipeline_parallel_size": pp}
            elif n > 1:
                spread = {"strategy": chosen, "gpus": gpus_per_node, "nodes": nodes}
            try:
                answers[n] = estimate(model, mode=mode, gpu=gpu, gpu_memory=gpu_memory, **options, **spread)
            except InputError as exc:  # this count is refused (the request itself was accepted at 1 GPU or is refused there too)
                if n == 1:
                    raise
                answers[n] = exc
        return answers[n]

    first = at(1)
    assert isinstance(first, Estimate)
    if first.library == "gguf":
        return _gguf_counts(first, mode, hardware, tuple(n for n in tried if n <= layout(n)[0]), options)
    where = "tensor parallel within a node, then pipeline stages of whole nodes" if mode == Mode.SERVING.value else (
        "tensor parallel within one node" if mode == Mode.INFERENCE.value else chosen)
    note = DDP_NOTE if chosen == Strategy.DDP.value else ""
    return {str(row.dtype): fewest_gpus(_trial(at, str(row.dtype), mode, chosen, hardware.total_bytes, wording, heads), hardware.name,
                                         hardware.total_bytes, tried, note=note or where)
            for row in first.rows}


GGUF_WHERE = ("llama.cpp's default layer split (--split-mode layer; layers in proportion to each GPU's free memory, equal for "
              "GPUs of one kind; the output layer on the last GPU, the token embeddings on the CPU), every layer, its KV cache and "
              "a compute buffer on the GPUs at the row's context; within one machine. Fewer GPUs still run it with layers in RAM "
              "(the row's fit says how many fit one GPU)")


def _gguf_counts(first: Estimate, mode: str, hardware: Any, tried: tuple[int, ...], options: dict[str, Any]) -> dict[str, GPUCount]:
    """A GGUF file run by llama.cpp: each count's split from the row's own plan (:mod:`estimator.gguf.multi_gpu`)."""
    from estimator.fit.runtime import CUDA_CONTEXT_BYTES
    from estimator.gguf.multi_gpu import layer_split

    if mode != Mode.INFERENCE.value:
        raise UnsupportedError(["How many GPUs is counted for a GGUF file to run it in llama.cpp: choose ", Option("mode"), " inference."])
    if options.get("n_gpu_layers") not in (None, "all", -1):
        raise BadOptionError([Option("n_gpu_layers"), " is what counting GPUs varies (every layer on the GPUs); leave it unset."],
                             option="n_gpu_layers")
    capacity = hardware.total_bytes

    def trial_for(row: Row) -> Callable[[int], Trial]:
        def trial(n: int) -> Trial:
            found = layer_split(row.gguf_plan, n)
            fullest = found.fullest
            shape = "1 GPU" if n == 1 else f"llama.cpp layer split over {n} GPUs, the fullest GPU ({fullest.describe()})"
            details: dict[str, Any] = {"method": str(row.method), "ctx": row.gguf_plan.n_ctx, "cpu_bytes": found.cpu_bytes,
                                       "pipeline_parallel": found.pipeline_parallel, "cuda_context_bytes": CUDA_CONTEXT_BYTES,
                                       "devices": [d.to_dict() for d in found.devices]}
            return Trial(n, fullest.total_bytes + CUDA_CONTEXT_BYTES, capacity, shape, details=details)
        return trial

    counted = {}
    for row in first.rows:
        if row.gguf_plan is None:
            raise UnsupportedError([f"{row.dtype}: no llama.cpp plan for this row, so its GPUs are not counted."])
        counted[str(row.dtype)] = fewest_gpus(trial_for(row), hardware.name, capacity, tried,
                                              note=f"{GGUF_WHERE}; ctx {row.gguf_plan.n_ctx:,}")
    return counted


def serving_layout(n: int, heads: int | None) -> tuple[int, int]:
    """``n`` GPUs for vLLM as (tensor parallel, pipeline parallel): the largest tensor-parallel size within a node that
    divides the attention heads (vLLM refuses others), the rest as pipeline stages."""
    tp = layout(n)[0]
    while tp > 1 and heads is not None and (heads % tp or n % tp):
        tp //= 2
    return tp, n // tp


def _attention_heads(model: Any, options: dict[str, Any]) -> int | None:
    """The config's ``num_attention_heads`` (a multimodal config's text part), which vLLM's tensor parallel size must divide."""
    from estimator.options import Library
    from estimator.source.reference import ModelRef, parse_reference
    from estimator.source.resolve import resolve

    ref = model if isinstance(model, ModelRef) else parse_reference(str(model), revision=options.get("revision"))
    if options.get("revision") and isinstance(model, ModelRef):
        ref = dataclasses.replace(ref, revision=options["revision"])
    config = resolve(ref, Library.AUTO, token=options.get("token")).config
    for part in (config, config.get("text_config") or {}):
        for key in HEAD_KEYS:
            heads = part.get(key) if isinstance(part, dict) else None
            if isinstance(heads, int) and heads > 0:
                return heads
    return None


def _trial(at: Callable[[int], Estimate | InputError], dtype: str, mode: str, strategy: str, capacity: int,
           wording: Wording, heads: int | None = None) -> Callable[[int], Trial]:
    def trial(n: int) -> Trial:
        gpus_per_node, nodes = layout(n)
        if mode == Mode.SERVING.value:
            tp, pp = serving_layout(n, heads)
            shape = f"tensor parallel {tp} x pipeline parallel {pp}" if n > 1 else "1 GPU"
        else:
            shape = (f"{strategy} over {n} GPUs" + (f" ({gpus_per_node} per node x {nodes} nodes)" if nodes > 1 else "")) if n > 1 else "1 GPU"
        found = at(n)
        if isinstance(found, InputError):
            return Trial(n, None, capacity, shape, reason=found.worded(wording.option))
        row = next((r for r in found.rows if str(r.dtype) == dtype), None)
        if row is None:
            return Trial(n, None, capacity, shape, reason="no row for this dtype")
        return _row_trial(row, n, capacity, shape)
    return trial


def _row_trial(row: Row, n: int, capacity: int, shape: str) -> Trial:
    if row.serving:
        plan = row.serving
        details = {k: plan.get(k) for k in ("weights_bytes", "kv_cache_tokens", "max_concurrency", "max_model_len")}
        return Trial(n, None, capacity, shape, verdict=bool(plan.get("fits")), details={**details, "method": str(row.method)},
                     reason=None if plan.get("fits") is not None else "no serving plan (see the notes)")
    fit = row.fit or {}
    needed = fit.get("needed_bytes")
    why = next((note for note in row.notes if "not simulated" in note or "peak_bytes is null" in note), "no figure (see the row's notes)")
    return Trial(n, needed, capacity, shape, reason=None if needed is not None else why, details={"method": str(row.method)})


def count_text(parsed: dict[str, Any], output_format: str, rendered: str) -> str:
    """The CLI's ``--count-gpus``: ``rendered`` (the single answer) followed by the count, from the options as the CLI parsed
    them (its flags' names are :func:`estimator.estimate`'s): lines for a table or Markdown, a ``gpu_count`` object in JSON."""
    import inspect
    import json

    if output_format == "csv":
        raise BadOptionError([Option("count_gpus"), " answers in table, json or markdown, not csv."], option="count_gpus")
    known = set(inspect.signature(estimate).parameters) - {"model", "timeout", *VARIED}
    options = {k: v for k, v in parsed.items() if k in known and v is not None}
    counted = count_gpus(parsed["model"], mode=str(parsed.get("mode") or "load"), strategy=parsed.get("strategy"), gpu=parsed.get("gpu"),
                         gpu_memory=parsed.get("gpu_memory"), **options)
    if output_format == "json":
        data = json.loads(rendered)
        data["gpu_count"] = {dtype: found.to_dict() for dtype, found in counted.items()}
        return json.dumps(data, indent=2)
    return rendered.rstrip("\n") + "\n\nHow many GPUs:\n" + "\n".join(f"- {found.sentence(dtype)}" for dtype, found in counted.items())


VARIED = ("gpus", "nodes", "strategy", "tensor_parallel_size", "pipeline_parallel_size", "gpu", "gpu_memory", "mode")
