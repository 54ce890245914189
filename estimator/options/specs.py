"""The request's typed parts: each spec goes only to the stage it shapes; :class:`Options` holds them all."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from estimator.options.vocab import (
    DEFAULT_DTYPES,
    AttnImplementation,
    Device,
    DType,
    FlashAttn,
    KVCacheDType,
    Library,
    Mode,
    Offload,
    Optimizer,
    ServingQuantization,
    Strategy,
    VLLMVersion,
)

DEFAULT_SEQ_LEN = 512  # tokens, when a text model's workload gives no seq_len
DEFAULT_IMAGES = 1  # images per prompt of a vision-language model's inference or training step, when not given


@dataclass(frozen=True)
class LoadSpec:
    """The load question: which library builds the model, the dtype of each row, and whether a repo's code may run."""

    library: Library = Library.AUTO
    dtypes: tuple[DType, ...] = DEFAULT_DTYPES
    trust_remote_code: bool = False
    bnb_compute_dtype: DType | None = None  # int8/int4 rows: the dtype= passed to from_pretrained; None: transformers' "auto"


@dataclass(frozen=True)
class InputShape:
    """The inputs of one step: batch, sequence length (text) or image size (vision), tokens to generate,
    and what each prompt of a vision-language or speech model carries (docs/multimodal.md)."""

    batch_size: int = 1
    seq_len: int | None = None  # None: DEFAULT_SEQ_LEN for text models (a multimodal prompt: its text tokens)
    image_size: int | None = None  # None: the model's own (its config or pretrained config; a VLM: its processor's resolution)
    max_new_tokens: int = 0
    images: int | None = None  # images per prompt of a vision-language model; None: DEFAULT_IMAGES
    video_frames: int = 0  # frames of one video per prompt, where the model takes video
    audio_seconds: float | None = None  # speech models: seconds of audio per sample; None: the feature extractor's window

    @property
    def text_len(self) -> int:
        return self.seq_len or DEFAULT_SEQ_LEN


@dataclass(frozen=True)
class TrainingSpec:
    """How a training step is run."""

    optimizer: Optimizer = Optimizer.ADAMW
    pure_16bit: bool = False
    gradient_checkpointing: bool = False
    lora_rank: int | None = None
    lora_targets: tuple[str, ...] | None = None


@dataclass(frozen=True)
class ServingSpec:
    """How a vLLM server would be started (``--mode serving``); names and defaults are vLLM's.

    ``None``: vLLM's default, which depends on the model (``max_model_len``: the config's
    ``max_position_embeddings``) or the GPU (``max_num_seqs``, ``max_num_batched_tokens``; see
    :func:`estimator.serving.plan.batch_defaults`)."""

    gpu_memory_utilization: float = 0.9
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    kv_cache_dtype: KVCacheDType = KVCacheDType.AUTO
    block_size: int = 16
    tensor_parallel_size: int = 1  # vLLM's --tensor-parallel-size: the plan is per rank
    pipeline_parallel_size: int = 1  # vLLM's --pipeline-parallel-size: per stage, the cache sized from the smallest
    quantization: ServingQuantization = ServingQuantization.NONE  # vLLM's --quantization of a 16-bit checkpoint
    vllm_version: VLLMVersion = VLLMVersion.V0_19  # whose accounting the plan follows


@dataclass(frozen=True)
class WorkSpec:
    """The workload: load only, an inference step, a training step, or serving, and its shape."""

    mode: Mode = Mode.LOAD
    shape: InputShape = InputShape()
    training: TrainingSpec = TrainingSpec()
    serving: ServingSpec = ServingSpec()


@dataclass(frozen=True)
class HardwareSpec:
    """Where it runs: the device whose kernels are modelled, and a GPU to fit on."""

    device: Device = Device.CUDA
    gpu: str | None = None  # a GPU name (checked against the list by estimator.fit.gpus.find_gpu)
    gpu_memory: str | None = None  # or a capacity given by hand, "24GiB" (estimator.fit.gpus.parse_memory)
    attn_implementation: AttnImplementation | None = None  # the attention kernel; None: transformers' default for the model
    # device cpu: the threads of the run simulated (the kernels' per-thread scratch); parse_options sets the
    # asking process's torch.get_num_threads() when not given, so a sweep's one-thread workers answer as it does
    cpu_threads: int | None = None

    @property
    def fits_a_gpu(self) -> bool:
        """A CUDA run checked against a GPU: its simulations replay the caching allocator over the whole model."""
        return self.device is Device.CUDA and (self.gpu is not None or self.gpu_memory is not None)


@dataclass(frozen=True)
class GGUFSpec:
    """How llama.cpp runs a GGUF file: context, KV cache types, flash attention, GPU layers, which file.

    ``ctx`` None: the model's training context (llama.cpp's ``-c 0``, its default);
    ``n_gpu_layers`` None: as many as fit when a GPU is given, else none; ``gguf_file`` None: every file.
    """

    ctx: int | None = None
    cache_type: str = "f16"
    cache_type_v: str | None = None  # None: the same as cache_type
    flash_attn: FlashAttn = FlashAttn.AUTO
    n_gpu_layers: int | None = None
    gguf_file: str | None = None

    @property
    def type_v(self) -> str:
        return self.cache_type_v or self.cache_type

    @property
    def is_default(self) -> bool:
        return self == GGUFSpec()

    def given(self) -> list[str]:
        """The names of the options that differ from llama.cpp's defaults, in field order."""
        default = GGUFSpec()
        return [f.name for f in fields(self) if getattr(self, f.name) != getattr(default, f.name)]


@dataclass(frozen=True)
class ParallelSpec:
    """Several GPUs: ``gpus`` per node, ``nodes``, the strategy (None: one GPU) and ZeRO's offload."""

    gpus: int = 1
    nodes: int = 1
    strategy: Strategy | None = None
    offload: Offload = Offload.NONE

    @property
    def world_size(self) -> int:
        return self.gpus * self.nodes


@dataclass(frozen=True)
class Options:
    """Every option of a request, parsed and validated once; hashable, so it is its own cache key."""

    load: LoadSpec = LoadSpec()
    work: WorkSpec = WorkSpec()
    hardware: HardwareSpec = HardwareSpec()
    gguf: GGUFSpec = GGUFSpec()
    parallel: ParallelSpec = ParallelSpec()

    @property
    def mode(self) -> Mode:
        return self.work.mode

    @property
    def dtypes(self) -> tuple[DType, ...]:
        return self.load.dtypes

    def shaping(self, revision: str | None) -> dict[str, Any]:
        """The options that shaped the result, by CLI name ('-' -> '_'), for ``Estimate.options``."""
        load, work, shape, training = self.load, self.work, self.work.shape, self.work.training
        shaped: dict[str, Any] = {
            "library": load.library.value,
            "dtypes": [d.value for d in load.dtypes],
            "mode": work.mode.value,
            "revision": revision,
            "trust_remote_code": load.trust_remote_code,
        }
        if load.bnb_compute_dtype is not None:
            shaped["bnb_compute_dtype"] = load.bnb_compute_dtype.value
        if work.mode is Mode.SERVING:
            serving = work.serving
            shaped.update(gpu_memory_utilization=serving.gpu_memory_utilization, max_model_len=serving.max_model_len,
                          max_num_seqs=serving.max_num_seqs, max_num_batched_tokens=serving.max_num_batched_tokens,
                          kv_cache_dtype=serving.kv_cache_dtype.value, block_size=serving.block_size,
                          tensor_parallel_size=serving.tensor_parallel_size, pipeline_parallel_size=serving.pipeline_parallel_size,
                          quantization=serving.quantization.value, vllm_version=serving.vllm_version.value)
        elif work.mode is not Mode.LOAD:
            shaped.update(batch_size=shape.batch_size, seq_len=shape.text_len, image_size=shape.image_size, device=self.hardware.device.value)
            if self.hardware.cpu_threads is not None:
                shaped["cpu_threads"] = self.hardware.cpu_threads
            if shape.images is not None:
                shaped["images"] = shape.images
            if shape.video_frames:
                shaped["video_frames"] = shape.video_frames
            if shape.audio_seconds is not None:
                shaped["audio_seconds"] = shape.audio_seconds
        if work.mode is Mode.INFERENCE:
            shaped["max_new_tokens"] = shape.max_new_tokens
        if work.mode is Mode.TRAINING:
            shaped.update(optimizer=training.optimizer.value, pure_16bit=training.pure_16bit, gradient_checkpointing=training.gradient_checkpointing)
            if training.lora_rank is not None:
                shaped.update(lora_rank=training.lora_rank, lora_targets=list(training.lora_targets) if training.lora_targets else None)
        if self.hardware.attn_implementation is not None:
            shaped["attn_implementation"] = self.hardware.attn_implementation.value
        if self.hardware.gpu is not None:
            shaped["gpu"] = self.hardware.gpu
        if self.hardware.gpu_memory is not None:
            shaped["gpu_memory"] = self.hardware.gpu_memory
        if self.parallel.strategy is not None:
            shaped.update(gpus=self.parallel.gpus, nodes=self.parallel.nodes, strategy=self.parallel.strategy.value,
                          offload=self.parallel.offload.value)
        return shaped
