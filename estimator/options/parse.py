"""The request built once from the keywords of :func:`estimator.estimate`, and what this version refuses."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from estimator.errors import BadOptionError, Option, UnsupportedError
from estimator.options.specs import (
    GGUFSpec,
    HardwareSpec,
    InputShape,
    LoadSpec,
    Options,
    ParallelSpec,
    ServingSpec,
    TrainingSpec,
    WorkSpec,
)
from estimator.options.vocab import (
    AttnImplementation,
    Device,
    FlashAttn,
    KVCacheDType,
    Library,
    Mode,
    Offload,
    Optimizer,
    ServingQuantization,
    Strategy,
    VLLMVersion,
    parse_bnb_compute_dtype,
    parse_cache_type,
    parse_dtypes,
    parse_fraction,
    positive_int,
)


def _optional_int(value: object, *, option: str, minimum: int = 1, maximum: int = 1 << 30) -> int | None:
    return None if value is None or value == "" else positive_int(value, option=option, minimum=minimum, maximum=maximum)


def _seconds(value: object) -> float | None:
    """Seconds of audio: a number above 0, at most an hour."""
    if value is None or value == "":
        return None
    try:
        seconds = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        seconds = float("nan")
    if not 0 < seconds <= 3600:
        raise BadOptionError([Option("audio_seconds"), f" must be a number of seconds above 0 and at most 3600; got {value!r}."],
                             option="audio_seconds")
    return seconds


def _targets(value: object) -> tuple[str, ...] | None:
    if not value:
        return None
    if isinstance(value, str):
        return tuple(part.strip() for part in value.split(",") if part.strip()) or None
    if isinstance(value, Iterable):
        return tuple(str(part) for part in value)
    raise BadOptionError([Option("lora_targets"), f" must be module names separated by commas; got {value!r}."])


def parse_options(
    *, library: object = "auto", dtypes: Any = None, mode: object = "load", device: object = "cuda", optimizer: object = "adamw",
    batch_size: object = 1, seq_len: object = None, image_size: object = None, max_new_tokens: object = 0, pure_16bit: bool = False,
    images: object = None, video_frames: object = 0, audio_seconds: object = None,
    gradient_checkpointing: bool = False, lora_rank: object = None, lora_targets: object = None, gpu: str | None = None,
    trust_remote_code: bool = False, bnb_compute_dtype: object = None, gpu_memory: object = None, ctx: object = None,
    cache_type: object = "f16", cache_type_v: object = None, flash_attn: object = "auto", n_gpu_layers: object = None,
    gguf_file: object = None, gpu_memory_utilization: object = 0.9, max_model_len: object = None, max_num_seqs: object = None,
    max_num_batched_tokens: object = None, kv_cache_dtype: object = "auto", block_size: object = 16,
    tensor_parallel_size: object = 1, pipeline_parallel_size: object = 1, quantization: object = None,
    vllm_version: object = None, gpus: object = 1,
    nodes: object = 1, strategy: object = None, offload: object = "none", attn_implementation: object = None, cpu_threads: object = None,
) -> Options:
    """The keywords of :func:`estimator.estimate`, parsed into :class:`Options` and checked once."""
    options = Options(
        load=LoadSpec(
            library=Library.parse(library, option="library"),
            dtypes=parse_dtypes(dtypes),
            trust_remote_code=bool(trust_remote_code),
            bnb_compute_dtype=parse_bnb_compute_dtype(bnb_compute_dtype),
        ),
        work=WorkSpec(
            mode=Mode.parse(mode, option="mode"),
            shape=InputShape(
                batch_size=positive_int(batch_size, option="batch_size", maximum=1 << 20),
                seq_len=None if seq_len is None else positive_int(seq_len, option="seq_len", maximum=1 << 24),
                image_size=None if image_size is None else positive_int(image_size, option="image_size", maximum=1 << 16),
                max_new_tokens=positive_int(max_new_tokens, option="max_new_tokens", minimum=0, maximum=1 << 24),
                images=_optional_int(images, option="images", minimum=0, maximum=64),
                video_frames=positive_int(video_frames or 0, option="video_frames", minimum=0, maximum=1 << 12),
                audio_seconds=_seconds(audio_seconds),
            ),
            training=TrainingSpec(
                optimizer=Optimizer.parse(optimizer, option="optimizer"),
                pure_16bit=bool(pure_16bit),
                gradient_checkpointing=bool(gradient_checkpointing),
                lora_rank=None if lora_rank is None else positive_int(lora_rank, option="lora_rank", maximum=1 << 16),
                lora_targets=_targets(lora_targets),
            ),
            serving=ServingSpec(
                gpu_memory_utilization=parse_fraction(gpu_memory_utilization, option="gpu_memory_utilization"),
                max_model_len=_optional_int(max_model_len, option="max_model_len", maximum=1 << 24),
                max_num_seqs=_optional_int(max_num_seqs, option="max_num_seqs", maximum=1 << 20),
                max_num_batched_tokens=_optional_int(max_num_batched_tokens, option="max_num_batched_tokens", maximum=1 << 24),
                kv_cache_dtype=KVCacheDType.parse(kv_cache_dtype, option="kv_cache_dtype"),
                block_size=positive_int(block_size, option="block_size", maximum=1 << 12),
                tensor_parallel_size=positive_int(tensor_parallel_size, option="tensor_parallel_size", maximum=1 << 10),
                pipeline_parallel_size=positive_int(pipeline_parallel_size, option="pipeline_parallel_size", maximum=1 << 10),
                quantization=ServingQuantization.parse(quantization if quantization not in (None, "") else "none",
                                                       option="quantization"),
                vllm_version=VLLMVersion.parse_version(vllm_version if vllm_version not in (None, "") else VLLMVersion.V0_19.value),
            ),
        ),
        hardware=HardwareSpec(device=Device.parse(device, option="device"), gpu=str(gpu).strip() or None if gpu else None,
                              gpu_memory=str(gpu_memory).strip() or None if gpu_memory else None,
                              attn_implementation=None if attn_implementation in (None, "", "auto") else
                              AttnImplementation.parse(attn_implementation, option="attn_implementation"),
                              cpu_threads=_cpu_threads(cpu_threads, device)),
        gguf=GGUFSpec(
            ctx=None if ctx is None else positive_int(ctx, option="ctx", maximum=1 << 24),
            cache_type=parse_cache_type("f16" if cache_type is None else cache_type),
            cache_type_v=None if cache_type_v is None else parse_cache_type(cache_type_v, option="cache_type_v"),
            flash_attn=FlashAttn.parse("auto" if flash_attn is None else flash_attn, option="flash_attn"),
            n_gpu_layers=None if n_gpu_layers is None else _gpu_layers(n_gpu_layers),
            gguf_file=str(gguf_file).strip() or None if gguf_file is not None else None,
        ),
        parallel=ParallelSpec(
            gpus=positive_int(gpus, option="gpus", maximum=1 << 16),
            nodes=positive_int(nodes, option="nodes", maximum=1 << 16),
            strategy=None if strategy in (None, "", "none") else Strategy.parse(strategy, option="strategy"),
            offload=Offload.parse(offload if offload not in (None, "") else "none", option="offload"),
        ),
    )
    check_supported(options)
    return options


def _cpu_threads(value: object, device: object) -> int | None:
    """``cpu_threads`` for ``device`` cpu: as given, else this process's ``torch.get_num_threads()`` (the
    asking machine's; a sweep's workers get the asker's count); ``None`` for cuda, which refuses it."""
    if Device.parse(device, option="device") is not Device.CPU:
        if value not in (None, ""):
            raise BadOptionError([Option("cpu_threads"), " sizes the CPU kernels' per-thread scratch of ", Option("device"),
                                  " cpu; drop it, or simulate the CPU run with ", Option("device"), " cpu."], option="cpu_threads")
        return None
    if value in (None, ""):
        import torch

        return torch.get_num_threads()
    return positive_int(value, option="cpu_threads", maximum=1 << 12)


def _gpu_layers(value: object) -> int:
    """llama.cpp's ``-ngl``: a layer count, ``-1`` or ``all`` for every layer (the output layer included)."""
    if isinstance(value, str) and value.strip().lower() in ("all", "-1"):
        return -1
    return positive_int(value, option="n_gpu_layers", minimum=0, maximum=1 << 20)


def check_supported(options: Options) -> None:
    """Refuse, before any work, the options this version cannot answer (with what to use instead).

    The GGUF options are checked against the repo (GGUF files only) in ``estimator.api``.
    """
    hardware = options.hardware
    if hardware.gpu is not None and hardware.gpu_memory is not None:
        raise BadOptionError([Option("gpu"), " and ", Option("gpu_memory"), " both say what to fit on: give one of them."], option="gpu")
    if (hardware.gpu or hardware.gpu_memory) and hardware.device is Device.CPU:
        raise BadOptionError([
            Option("gpu"), " asks whether the model fits a GPU, which needs ", Option("device"),
            " cuda (the CPU simulation has no GPU runtime to fit).",
        ], option="gpu")
    if options.mode is Mode.SERVING and hardware.gpu is None and hardware.gpu_memory is None:
        raise BadOptionError([Option("mode"), " serving plans a server on one GPU: name it with ", Option("gpu"),
                              " (e.g. H100-80GB) or give its memory with ", Option("gpu_memory"), " (e.g. 24GiB)."])
    serving = options.work.serving
    if options.mode is not Mode.SERVING and (serving.tensor_parallel_size > 1 or serving.pipeline_parallel_size > 1
                                             or serving.quantization is not ServingQuantization.NONE):
        raise BadOptionError([Option("tensor_parallel_size"), ", ", Option("pipeline_parallel_size"), " and ", Option("quantization"),
                              " are vLLM's and shape ", Option("mode"), " serving only; for inference on several GPUs use ",
                              Option("gpus"), " with ", Option("strategy"), " tp."], option="tensor_parallel_size")
    _check_parallel(options)
    _check_attention(options)
    training = options.work.training
    if training.lora_targets is not None and training.lora_rank is None:
        raise BadOptionError([Option("lora_targets"), " needs ", Option("lora_rank"), " (the LoRA rank, e.g. 16)."])


_TRAINING_STRATEGIES = "ddp, zero1, zero2, zero3 or fsdp"


def _check_attention(options: Options) -> None:
    """The attention kernel shapes simulated steps (inference, training); flash_attention_2 runs on CUDA in 16 bits."""
    kernel = options.hardware.attn_implementation
    if kernel is None:
        return
    if options.mode not in (Mode.INFERENCE, Mode.TRAINING):
        raise BadOptionError([Option("attn_implementation"), f" {kernel.value} shapes ", Option("mode"),
                              " inference and training (the simulated steps); drop it for ", Option("mode"), f" {options.mode.value}."],
                             option="attn_implementation")
    if kernel is AttnImplementation.FLEX_ATTENTION:
        raise UnsupportedError([Option("attn_implementation"), " flex_attention is not simulated yet (its compiled kernel is not "
                                "modelled); use sdpa, eager or flash_attention_2."])
    if kernel is AttnImplementation.FLASH_ATTENTION_2 and options.hardware.device is Device.CPU:
        raise BadOptionError([Option("attn_implementation"), " flash_attention_2 runs on CUDA GPUs only; use ", Option("device"),
                              " cuda, or sdpa or eager on the CPU."], option="attn_implementation")
    # flash_attention_2: a float32 row gets no peak and says why (estimator.peak.kernels.attention.row_refusal)
    if options.parallel.strategy is not None:
        raise UnsupportedError([Option("attn_implementation"), " is not simulated with ", Option("strategy"),
                                " yet; drop one of them."])


def _check_parallel(options: Options) -> None:
    """The strategy fits the mode, the GPU count and the offload (see docs/parallel.md)."""
    par, mode = options.parallel, options.work.mode
    if par.strategy is None:
        if par.world_size > 1:
            raise BadOptionError([
                Option("gpus"), f" {par.gpus}" + (f" on {par.nodes} nodes" if par.nodes > 1 else "") + " needs ",
                Option("strategy"), f": {_TRAINING_STRATEGIES} for training, tp for inference.",
            ], option="strategy")
        if par.offload is not Offload.NONE:
            raise BadOptionError([Option("offload"), " needs ", Option("strategy"), " zero1, zero2 or zero3."], option="offload")
        return
    if mode is Mode.LOAD:
        raise BadOptionError([Option("strategy"), " applies to ", Option("mode"), " training (", _TRAINING_STRATEGIES,
                              ") or inference (tp); load figures are per model, not per GPU."], option="strategy")
    if par.strategy is Strategy.TP and mode is not Mode.INFERENCE:
        raise BadOptionError([Option("strategy"), f" tp is simulated for inference only; for training use {_TRAINING_STRATEGIES}."],
                             option="strategy")
    if par.strategy is not Strategy.TP and mode is not Mode.TRAINING:
        raise BadOptionError([Option("strategy"), f" {par.strategy.value} is a training strategy; for inference on several GPUs use tp."],
                             option="strategy")
    if par.strategy is Strategy.TP and par.nodes > 1:
        raise UnsupportedError([Option("strategy"), " tp across nodes is not simulated; use ", Option("nodes"), " 1."])
    if par.offload is not Offload.NONE and par.strategy not in (Strategy.ZERO1, Strategy.ZERO2, Strategy.ZERO3):
        raise BadOptionError([Option("offload"), f" is DeepSpeed ZeRO's; {par.strategy.value} has none (use zero1, zero2 or zero3)."],
                             option="offload")
    if par.offload is Offload.OPTIMIZER_PARAMS and par.strategy is not Strategy.ZERO3:
        raise BadOptionError([Option("offload"), " optimizer+params needs ", Option("strategy"), " zero3 (parameter offload is ZeRO-3's)."],
                             option="offload")
