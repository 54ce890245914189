"""``estimate()``: the one entry point of the core. Returns an :class:`Estimate`; never prints."""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from estimator.cache import LRUCache
from estimator.errors import HubError, Option, UnsupportedError
from estimator.options import DType, Library, Mode, Options, parse_options, seconds
from estimator.result import Estimate, Row
from estimator.source import hub
from estimator.source.limits import check_config, max_positions
from estimator.source.reference import ModelRef, is_gguf_path, parse_reference
from estimator.source.resolve import Resolved, detect_library, resolve_hub, resolve_local

if TYPE_CHECKING:
    from concurrent.futures import Future

    from estimator.fit.gpus import GPU
    from estimator.peak.sim.layer_trace import Periodicity

logger = logging.getLogger(__name__)

_CACHE: LRUCache[Estimate] = LRUCache(maxsize=256)
STORED_DTYPES = {DType.FLOAT32, DType.FLOAT16, DType.BFLOAT16, DType.INT8, DType.INT4}


def estimate(
    model: str | ModelRef, *, library: str = "auto", dtypes: Any = None, mode: str = "load", batch_size: Any = 1, seq_len: Any = None,
    image_size: Any = None, max_new_tokens: Any = 0, images: Any = None, video_frames: Any = 0, audio_seconds: Any = None,
    device: str = "cuda", optimizer: str = "adamw", pure_16bit: bool = False,
    gradient_checkpointing: bool = False, lora_rank: Any = None, lora_targets: Any = None, gpu: str | None = None,
    revision: str | None = None, token: str | None = None, trust_remote_code: bool = False, cross_check: bool = False,
    timeout: float = hub.DEFAULT_TIMEOUT_S, bnb_compute_dtype: str | None = None, gpu_memory: Any = None, ctx: Any = None,
    cache_type: Any = "f16", cache_type_v: Any = None, flash_attn: Any = "auto", n_gpu_layers: Any = None, gguf_file: str | None = None,
    gpu_memory_utilization: Any = 0.9, max_model_len: Any = None, max_num_seqs: Any = None, max_num_batched_tokens: Any = None,
    kv_cache_dtype: str = "auto", block_size: Any = 16, tensor_parallel_size: Any = 1, pipeline_parallel_size: Any = 1,
    quantization: str | None = None, vllm_version: str | None = None,
    gpus: Any = 1, nodes: Any = 1, strategy: str | None = None, offload: str = "none", attn_implementation: str | None = None, cpu_threads: Any = None,
) -> Estimate:
    """Estimate the memory ``model`` needs, per dtype. See ``docs/CONTRACT.md`` for every field.

    ``model`` is a Hub repo id, a Hub URL or a local folder with a config.json, or a
    :class:`~estimator.source.reference.ModelRef` already parsed (the app parses what its visitors
    type with ``parse_hub_reference``, which never looks at the disk; ``revision``, when given,
    replaces the ref's). ``token`` (else ``HF_TOKEN`` or the login cache) opens gated and private
    repos. ``cross_check`` also builds the model on the meta device when the answer came from
    safetensors headers, and reports a mismatch in ``notes``.

    Answers from the Hub are cached by (repo, commit, options), never by token, and a cached answer
    goes only to a caller who has just been shown to have access: ``model_info`` of a private repo
    is itself refused without access, and for a gated repo (whose ``model_info`` is public) one
    small ``hub.check_access`` request with the caller's token comes before any answer, cached or
    not. A public repo's repeat costs the one ``model_info`` call.

    GGUF-only repos (llama.cpp): ``ctx``, ``cache_type`` (``cache_type_v``), ``flash_attn``,
    ``n_gpu_layers`` and ``gguf_file`` shape the inference rows, and ``gpu`` splits their layers
    between that GPU and the CPU; for other repos these options are refused (docs/gguf.md).

    ``mode="serving"`` plans a vLLM server on one GPU (``gpu`` or ``gpu_memory``, e.g. ``"24GiB"``),
    with vLLM's options of the same names (docs/serving.md); ``tensor_parallel_size`` and
    ``pipeline_parallel_size`` make it per rank of that many such GPUs, ``vllm_version`` picks whose
    accounting it follows.

    ``gpus`` (per node), ``nodes``, ``strategy`` (ddp, zero1, zero2, zero3, fsdp for training; tp
    for inference) and ``offload`` (ZeRO: none, optimizer, optimizer+params) make the figures per
    GPU (docs/parallel.md).

    ``attn_implementation`` (eager, sdpa, flash_attention_2; None: transformers' default for the model) is the
    attention kernel the simulated inference or training step runs (docs/peak.md, "Attention kernel").
    ``cpu_threads`` (``device="cpu"``): the threads of the CPU run simulated, which size its kernels'
    per-thread scratch; by default this process's ``torch.get_num_threads()``.
    """
    options = parse_options(
        library=library, dtypes=dtypes, mode=mode, device=device, optimizer=optimizer, batch_size=batch_size,
        seq_len=seq_len, image_size=image_size, max_new_tokens=max_new_tokens, pure_16bit=pure_16bit,
        images=images, video_frames=video_frames, audio_seconds=audio_seconds,
        gradient_checkpointing=gradient_checkpointing, lora_rank=lora_rank, lora_targets=lora_targets, gpu=gpu,
        trust_remote_code=trust_remote_code, bnb_compute_dtype=bnb_compute_dtype, gpu_memory=gpu_memory, ctx=ctx, cache_type=cache_type,
        cache_type_v=cache_type_v, flash_attn=flash_attn, n_gpu_layers=n_gpu_layers, gguf_file=gguf_file,
        gpu_memory_utilization=gpu_memory_utilization, max_model_len=max_model_len, max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens, kv_cache_dtype=kv_cache_dtype, block_size=block_size,
        tensor_parallel_size=tensor_parallel_size, pipeline_parallel_size=pipeline_parallel_size, quantization=quantization,
        vllm_version=vllm_version,
        gpus=gpus, nodes=nodes, strategy=strategy, offload=offload, attn_implementation=attn_implementation, cpu_threads=cpu_threads,
    )
    target_gpu(options)  # an unknown GPU or a malformed capacity is refused before any work
    timeout = seconds(timeout, option="timeout")  # how long each Hub call may take; not part of the answer
    if isinstance(model, ModelRef):
        ref = model if revision is None else replace(model, revision=revision)
    else:
        ref = parse_reference(model, revision=revision, endpoint=hub.endpoint() if "://" in model else None)
    if ref.path is not None and is_gguf_path(ref.path):  # a local .gguf file, or a folder of them: llama.cpp's rows
        from estimator.load import gguf  # llama.cpp's accounting, imported only for GGUF files

        result = gguf.local_gguf_estimate(ref.path, options=options, capacity_bytes=gpu_capacity(options), speed=gguf_speed(options))
        return _with_gguf_fit(result, options)
    if ref.path is not None:
        _refuse_gguf_options(options, str(ref.path))
        resolved = resolve_local(ref, options.load.library)
        return _estimate_resolved(resolved, options, cross_check=cross_check, token=token)

    assert ref.repo_id is not None
    try:
        info = hub.model_info(ref.repo_id, revision=ref.revision, token=token, timeout=timeout)
    except HubError:  # network, timeout, 5xx, 429 — not 404 or gated, which are InputErrors
        fallback = _from_catalog(ref.repo_id, ref.revision, options)
        if fallback is None:
            raise
        return fallback
    repo_id = info.id or ref.repo_id
    if info.gated:
        # model_info of a gated repo is public, and the client's own file cache may hold its config
        # from an earlier caller: only this check says the caller may read it (before any answer).
        hub.check_access(repo_id, revision=ref.revision, token=token, timeout=timeout)
    key = (repo_id, info.sha, options, cross_check)
    cached = _CACHE.get(key) if info.sha else None
    if cached is not None:
        logger.debug("cache hit for %s@%s", ref.repo_id, info.sha)
        return cached
    files = tuple(s.rfilename for s in (info.siblings or []))
    if options.load.library is Library.AUTO and _gguf_only(files):
        from estimator.load import gguf  # llama.cpp's accounting, imported only for GGUF repos

        result = gguf.gguf_estimate(info, options=options, token=token, timeout=timeout, capacity_bytes=gpu_capacity(options),
                                    speed=gguf_speed(options))
        result = _with_gguf_fit(result, options)
        if info.sha:
            _CACHE.put(key, result)
        return result
    _refuse_gguf_options(options, repo_id)
    headers = _start_headers(repo_id, info.sha or ref.revision, info, files, options, token=token, timeout=timeout)
    resolved = resolve_hub(ref, options.load.library, token=token, timeout=timeout, info=info)
    result = _estimate_resolved(resolved, options, cross_check=cross_check, token=token, timeout=timeout, headers=headers)
    if info.sha:
        _CACHE.put(key, result)
    return result


def _start_headers(repo_id: str, revision: str | None, info: hub.RepoInfo, files: tuple[str, ...], options: Options, *,
                   token: str | None, timeout: float) -> Future[Any] | None:
    """The checkpoint's safetensors headers of a load answer, read in a thread while the config is read (the same
    requests, one round trip fewer: docs/benchmarks.md), or None where the answer would not read them.

    Only for a load answer in stored dtypes of a transformers or timm repo with a config.json, or a sentence-transformers
    repo (whose Transformer module nearly always sits at the top; ``stored_rows`` reads its own folder's otherwise)."""
    if options.mode is not Mode.LOAD or not set(options.dtypes) <= STORED_DTYPES or "config.json" not in files:
        return None
    library = options.load.library
    if library is Library.AUTO:
        library = detect_library(None, files, info.library_name, info.tags)
    if library not in (Library.TRANSFORMERS, Library.TIMM, Library.SENTENCE_TRANSFORMERS):
        return None
    from estimator.load.rows import start_headers

    return start_headers(repo_id, revision, files, token=token, timeout=timeout)


def _gguf_only(files: tuple[str, ...]) -> bool:
    """``estimator.load.gguf.is_gguf_only``'s rule (GGUF files and no config.json), here so that other answers do not
    import llama.cpp's accounting."""
    return "config.json" not in files and any(name.lower().endswith(".gguf") for name in files)


def gpu_capacity(options: Options) -> int | None:
    """The bytes a GGUF row may put on the GPU asked about: what its driver reports less the CUDA
    context (``estimator.fit``); ``None`` without a GPU."""
    gpu = target_gpu(options)
    if gpu is None:
        return None
    from estimator.fit.runtime import CUDA_CONTEXT_BYTES

    return gpu.total_bytes - CUDA_CONTEXT_BYTES


def _with_gguf_fit(result: Estimate, options: Options) -> Estimate:
    """A GGUF estimate with ``fit`` on its inference rows for the GPU asked about (llama.cpp's offload plan)."""
    gpu = target_gpu(options)
    if options.hardware.attn_implementation is not None:  # transformers' kernels; llama.cpp's is --flash-attn
        raise UnsupportedError([Option("attn_implementation"), f" chooses transformers' attention kernel; {result.model} holds GGUF "
                                "files, run by llama.cpp: use ", Option("flash_attn"), " on or off instead."])
    if gpu is None:
        return result
    from estimator.fit.gguf_fit import with_gguf_fit

    return replace(result, rows=with_gguf_fit(result.rows, gpu))


def _refuse_gguf_options(options: Options, model: str) -> None:
    """The llama.cpp options answer only GGUF-only repos: refuse them elsewhere, naming the option."""
    if not options.gguf.is_default:
        raise UnsupportedError([Option(options.gguf.given()[0]), f" applies to GGUF files run by llama.cpp; {model} is not a GGUF-only repo. "
                                "For other models use ", Option("seq_len"), " and ", Option("mode"), " inference."])


def clear_cache() -> None:
    """Forget every cached estimate (tests and the app's admin use it)."""
    _CACHE.clear()


def _from_catalog(repo_id: str, revision: str | None, options: Options) -> Estimate | None:
    """The Hub could not be reached: answer from the bundled catalog, saying so on every row.

    None when the catalog lacks the repo or holds another revision than the one asked for. The
    answer is not cached, so the next call tries the Hub again.
    """
    from estimator.source.catalog import catalog_entry, catalog_lookup, catalog_note

    entry = catalog_entry(repo_id)
    if entry is None or revision not in (None, "main", entry.revision):
        return None
    resolved = catalog_lookup(repo_id, options.load.library)
    if resolved is None:
        return None
    logger.info("the Hub could not be reached; answering %s from the bundled catalog", repo_id)
    result = _estimate_resolved(resolved, options, cross_check=False, token=None)
    note = catalog_note(entry)
    return replace(result, rows=tuple(replace(row, notes=(note, *row.notes)) for row in result.rows))


def _estimate_resolved(resolved: Resolved, options: Options, *, cross_check: bool, token: str | None, timeout: float = hub.DEFAULT_TIMEOUT_S,
                       headers: Future[Any] | None = None) -> Estimate:
    check_config(resolved.config, model=resolved.name)
    if options.hardware.cpu_threads is not None and options.mode is not Mode.LOAD:  # device cpu: the run's threads
        from estimator.peak.kernels.cpu.isa import target_threads

        with target_threads(options.hardware.cpu_threads):
            return _rows_estimate(resolved, options, cross_check=cross_check, token=token, timeout=timeout)
    return _rows_estimate(resolved, options, cross_check=cross_check, token=token, timeout=timeout, headers=headers)


def _rows_estimate(resolved: Resolved, options: Options, *, cross_check: bool, token: str | None, timeout: float,
                   headers: Future[Any] | None = None) -> Estimate:
    rows: tuple[Row, ...] | None = None
    if resolved.source == "hub" and options.mode is Mode.LOAD and set(options.dtypes) <= STORED_DTYPES:
        from estimator.load import rows as loadrows

        rows = loadrows.stored_rows(resolved, options.load, token=token, timeout=timeout, cross_check=cross_check, headers=headers)
    gpu = target_gpu(options)
    # per dtype row: what the row's layer samples proved, so that the fit search's shapes run two (layer_trace)
    periodicities: dict[str, Periodicity] = {}
    if options.mode is Mode.SERVING and gpu is not None:  # check_supported: serving always names a GPU
        from estimator.serving.rows import serving_rows

        rows = serving_rows(resolved, options.load, options.work, gpu)
    if rows is None and options.mode is not Mode.LOAD:
        from estimator.peak.rows import peak_rows
        from estimator.speed.transformers_speed import row_speed

        rows = peak_rows(resolved, options.load, options.work, options.hardware, options.parallel,
                         speed=row_speed(options, resolved),  # rows[].speed with --gpu (docs/speed.md)
                         periodicities=periodicities if gpu is not None else None)
        rows = _strategy_speed(rows, options)
    if rows is None:
        from estimator.load import rows as loadrows

        rows = loadrows.built_rows(resolved, options.load)
    if gpu is not None and options.mode is not Mode.SERVING:  # a serving row's plan is its fit
        rows = _with_fit(rows, resolved, options, gpu, periodicities)
    return Estimate(
        model=resolved.name,
        revision=resolved.revision,
        library=resolved.library.value,
        architecture=_architecture(resolved),
        source=resolved.source,
        mode=options.mode,
        options=options.shaping(resolved.revision if resolved.source == "hub" else None),
        rows=rows,
    )


def _strategy_speed(rows: tuple[Row, ...], options: Options) -> tuple[Row, ...]:
    """A ``--strategy`` training row's gradient synchronisation on the GPU ``--gpu`` names (one node, full fine-tuning:
    :func:`estimator.speed.comm.data_parallel_answer`); other rows unchanged (docs/speed.md, "Several GPUs")."""
    parallel = options.parallel
    if parallel.strategy is None or options.mode is not Mode.TRAINING or options.hardware.gpu is None:
        return rows
    from estimator.speed.comm import data_parallel_answer
    from estimator.speed.hardware import find_hardware

    hardware = find_hardware(options.hardware.gpu)
    out = []
    for row in rows:
        if row.peak_bytes is None or row.total_bytes is None:
            out.append(row)
            continue
        if parallel.nodes > 1:
            answer, note = None, "no speed: the network between nodes is not in the hardware table, so the gradients' time is not modelled"
        elif options.work.training.lora_rank is not None:
            answer, note = None, "no speed: under a strategy only full fine-tuning's gradient synchronisation is modelled yet"
        else:
            answer, note = data_parallel_answer(weights_bytes=row.total_bytes, gpus=parallel.gpus, strategy=parallel.strategy.value,
                                                hardware=hardware)
        out.append(replace(row, speed=answer, notes=(*row.notes, note)))
    return tuple(out)


def gguf_speed(options: Options) -> Any:
    """llama.cpp's speed for GGUF inference rows on the GPU or Mac ``--gpu`` names (always with a known name; none with
    ``--gpu-memory`` alone, whose bandwidth is unknown): a function of a row's tensors, hyperparameters, GPU layers and
    context (:func:`estimator.speed.llamacpp.answer`), or ``None``."""
    if options.mode is not Mode.INFERENCE or options.hardware.gpu is None:
        return None
    from estimator.options import FlashAttn
    from estimator.speed.hardware import find_hardware
    from estimator.speed.llamacpp import answer

    hardware = find_hardware(options.hardware.gpu)
    shape, spec = options.work.shape, options.gguf

    def speed(tensors: Any, hp: Any, n_gpu_layers: int, n_ctx: int) -> Any:
        n_prompt = min(shape.seq_len or 512, n_ctx)
        n_gen = max(1, min(shape.max_new_tokens or 128, n_ctx - n_prompt))
        return answer(tensors, hp, hardware, n_gpu_layers=n_gpu_layers, n_prompt=n_prompt, n_gen=n_gen, n_ctx=n_ctx,
                      flash_attn=spec.flash_attn is not FlashAttn.OFF, type_k=spec.cache_type, type_v=spec.type_v)

    return speed


def target_gpu(options: Options) -> GPU | None:
    """The GPU of ``--gpu`` (by name) or ``--gpu-memory`` (a capacity), or ``None``."""
    if options.hardware.gpu is None and options.hardware.gpu_memory is None:
        return None  # without a GPU the list is not read (a load answer's start-up: docs/benchmarks.md)
    from estimator.fit.gpus import custom_gpu, find_gpu

    if options.hardware.gpu is not None:
        return find_gpu(options.hardware.gpu)
    if options.hardware.gpu_memory is not None:
        return custom_gpu(options.hardware.gpu_memory)
    return None


def _with_fit(rows: tuple[Row, ...], resolved: Resolved, options: Options, gpu: GPU,
              periodicities: dict[str, Periodicity] | None = None) -> tuple[Row, ...]:
    """Each row against ``gpu``; simulated rows are re-simulated for the largest batch and sequence (with the
    proof of their layer samples' periodicity in ``periodicities``, per dtype, where the row's simulation left
    one; else the search's first simulation makes it)."""
    from estimator.fit.plan import Simulate, with_fit

    shape = options.work.shape
    simulators: dict[str, Simulate] = {}
    if options.mode is not Mode.LOAD and options.parallel.strategy is None:  # per-GPU rows under a strategy: the verdict only
        from estimator.peak.rows import simulate_row
        from estimator.peak.sim.layer_trace import Periodicity

        held = {} if periodicities is None else periodicities
        for row in rows:
            # three layer samples prove the periodicity once (the row's, or the search's first), the later shapes run two
            periodicity = held.setdefault(str(row.dtype), Periodicity())

            def simulate(b: int, s: int, row: Row = row, periodicity: Periodicity = periodicity) -> Row:
                work = replace(options.work, shape=replace(shape, batch_size=b, seq_len=s))
                result = simulate_row(resolved, options.load, work, options.hardware, DType.parse(row.dtype, option="dtypes"),
                                      periodicity=periodicity)
                return replace(row, peak_bytes=result.peak_bytes, components=dict(result.components),
                               runtime_overhead=result.allocator_overhead, method=result.method)

            simulators[str(row.dtype)] = simulate
    text = resolved.library is not Library.TIMM
    limit = max_positions(resolved.config) if text else None
    if limit is not None and options.mode is not Mode.LOAD:  # the images' tokens share the context with the text
        from estimator.peak.rows import image_tokens

        limit -= image_tokens(resolved, options.work)
    if limit is not None:
        limit = max(1, limit - (shape.max_new_tokens if options.mode is Mode.INFERENCE else 0))
    return with_fit(rows, mode=options.mode.value, gpu=gpu, batch_size=shape.batch_size, seq_len=shape.text_len,
                    simulators=simulators, seq_limit=limit, vary_seq=text)


def _architecture(resolved: Resolved) -> str | None:
    if resolved.library is Library.TIMM:
        value = resolved.config.get("architecture")
    else:
        architectures = resolved.config.get("architectures")
        first = architectures[0] if isinstance(architectures, list) and architectures else None
        value = first or resolved.config.get("model_type") or resolved.config.get("_class_name")
    return value if isinstance(value, str) else None
