"""The closed vocabularies of the estimator, parsed once at the boundary.

Every option the CLI, the app and the Python API accept is one of these enums; parsing
raises :class:`~estimator.errors.BadOptionError` whose ``option`` field names the option (worded
by each adapter) and whose message lists the accepted values.

The request is built from them here too, once, by :func:`parse_options`: an :class:`Options` made
of a few small typed values, each handed only to the stage it shapes — :class:`LoadSpec` (what to
load: library, dtypes, whether a repo's code may run) to the source, build and load stages;
:class:`WorkSpec` (mode, :class:`InputShape`, :class:`TrainingSpec`) to the peak stage;
:class:`HardwareSpec` (device, GPU) to the peak and fit stages. Combinations this version cannot
answer are refused here, before any work (:func:`check_supported`).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, fields
from typing import Any, TypeVar

from estimator.errors import BadOptionError, Option, UnsupportedError

_C = TypeVar("_C", bound="_Choice")


class _Choice(str, enum.Enum):
    """A str-valued enum whose ``parse`` names the accepted values on failure."""

    @classmethod
    def parse(cls: type[_C], value: object, *, option: str) -> _C:
        """The member spelled ``value`` (case and ``-``/``_`` ignored); ``option`` is the keyword it came from."""
        if isinstance(value, cls):
            return value
        text = str(value).strip().lower().replace("_", "-")
        for member in cls:
            if text in (member.value, member.value.replace("_", "-")):
                return member
        choices = ", ".join(m.value for m in cls)
        raise BadOptionError([Option(option), f" must be one of {choices}; got {value!r}."])

    def __str__(self) -> str:
        return self.value


class DType(_Choice):
    """A row of the result: the precision the weights are loaded in."""

    FLOAT32 = "float32"
    FLOAT16 = "float16"
    BFLOAT16 = "bfloat16"
    FLOAT8 = "float8"
    INT8 = "int8"
    INT4 = "int4"

    @property
    def is_16bit(self) -> bool:
        return self in (DType.FLOAT16, DType.BFLOAT16)

    @property
    def is_quantized(self) -> bool:
        return self in (DType.FLOAT8, DType.INT8, DType.INT4)


class Mode(_Choice):
    LOAD = "load"
    INFERENCE = "inference"
    TRAINING = "training"
    SERVING = "serving"  # a vLLM-style memory plan on one GPU (estimator.serving)


class KVCacheDType(_Choice):
    """vLLM's ``--kv-cache-dtype``: the model's dtype, or one byte per value."""

    AUTO = "auto"
    FP8 = "fp8"


class Device(_Choice):
    CUDA = "cuda"
    CPU = "cpu"


class Library(_Choice):
    AUTO = "auto"
    TRANSFORMERS = "transformers"
    TIMM = "timm"
    DIFFUSERS = "diffusers"
    SENTENCE_TRANSFORMERS = "sentence-transformers"


class Optimizer(_Choice):
    ADAMW = "adamw"
    SGD = "sgd"
    ADAFACTOR = "adafactor"
    ADAMW8BIT = "adamw8bit"


class Component(_Choice):
    """What holds memory at the peak instant (keys of ``components``)."""

    WEIGHTS = "weights"
    GRADIENTS = "gradients"
    OPTIMIZER_STATES = "optimizer_states"
    ACTIVATIONS = "activations"
    TEMPORARIES = "temporaries"
    KV_CACHE = "kv_cache"
    INPUTS = "inputs"


class Strategy(_Choice):
    """How a step is spread over several GPUs (``--strategy``)."""

    DDP = "ddp"
    ZERO1 = "zero1"
    ZERO2 = "zero2"
    ZERO3 = "zero3"
    FSDP = "fsdp"
    TP = "tp"


class Offload(_Choice):
    """What DeepSpeed ZeRO moves to CPU memory (``--offload``)."""

    NONE = "none"
    OPTIMIZER = "optimizer"
    OPTIMIZER_PARAMS = "optimizer+params"


class OutputFormat(_Choice):
    TABLE = "table"
    JSON = "json"
    CSV = "csv"
    MARKDOWN = "markdown"


DEFAULT_DTYPES: tuple[DType, ...] = (DType.FLOAT32, DType.FLOAT16, DType.INT8, DType.INT4)


def parse_dtypes(values: str | Iterable[str | DType] | None) -> tuple[DType, ...]:
    """Parse ``"float32,float16"``, ``["float32", "int4"]`` or ``None`` (the defaults).

    Order is kept, duplicates dropped; an empty selection is an error.
    """
    if values is None:
        return DEFAULT_DTYPES
    if isinstance(values, (str, DType)):
        values = [values]
    if not isinstance(values, Iterable) or isinstance(values, (bytes, dict)):
        raise BadOptionError([Option("dtypes"), f" must be a dtype name or a list of them; got {values!r}."])
    parsed: list[DType] = []
    for value in values:
        for part in str(value).replace(",", " ").split():
            dtype = DType.parse(part, option="dtypes")
            if dtype not in parsed:
                parsed.append(dtype)
    if not parsed:
        raise BadOptionError([Option("dtypes"), " needs at least one of float32, float16, bfloat16, float8, int8, int4."])
    return tuple(parsed)


def positive_int(value: object, *, option: str, minimum: int = 1, maximum: int = 1 << 40) -> int:
    """Parse an integer option within [minimum, maximum]; booleans and floats with a fraction are refused."""
    if isinstance(value, bool):
        raise BadOptionError([Option(option), f" must be an integer; got {value!r}."])
    try:
        number = int(str(value).strip()) if not isinstance(value, int) else value
    except ValueError:
        raise BadOptionError([Option(option), f" must be an integer; got {value!r}."]) from None
    if not minimum <= number <= maximum:
        raise BadOptionError([Option(option), f" must be between {minimum} and {maximum:,}; got {number:,}."])
    return number


def seconds(value: object, *, option: str, maximum: float = 3600.0) -> float:
    """Parse a time limit in seconds: a finite number in (0, maximum]."""
    if isinstance(value, bool):
        raise BadOptionError([Option(option), f" must be a number of seconds; got {value!r}."])
    try:
        number = float(str(value).strip()) if not isinstance(value, (int, float)) else float(value)
    except ValueError:
        raise BadOptionError([Option(option), f" must be a number of seconds; got {value!r}."]) from None
    if not 0 < number <= maximum:  # NaN fails this too
        raise BadOptionError([Option(option), f" must be more than 0 and at most {maximum:g} seconds; got {value!r}."])
    return number


DEFAULT_SEQ_LEN = 512  # tokens, when a text model's workload gives no seq_len


@dataclass(frozen=True)
class LoadSpec:
    """The load question: which library builds the model, the dtype of each row, and whether a repo's code may run."""

    library: Library = Library.AUTO
    dtypes: tuple[DType, ...] = DEFAULT_DTYPES
    trust_remote_code: bool = False
    bnb_compute_dtype: DType | None = None  # int8/int4 rows: the dtype= passed to from_pretrained; None: transformers' "auto"


@dataclass(frozen=True)
class InputShape:
    """The inputs of one step: batch, sequence length (text) or image size (vision), tokens to generate."""

    batch_size: int = 1
    seq_len: int | None = None  # None: DEFAULT_SEQ_LEN for text models
    image_size: int | None = None  # None: the model's own (its config or pretrained config)
    max_new_tokens: int = 0

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

    @property
    def fits_a_gpu(self) -> bool:
        """A CUDA run checked against a GPU: its simulations replay the caching allocator over the whole model."""
        return self.device is Device.CUDA and (self.gpu is not None or self.gpu_memory is not None)


class FlashAttn(_Choice):
    """llama.cpp's ``--flash-attn``: auto (its default) lets the backend decide."""

    AUTO = "auto"
    ON = "on"
    OFF = "off"


CACHE_TYPES = ("f16", "f32", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")  # llama.cpp's -ctk / -ctv


def parse_cache_type(value: object, *, option: str = "cache_type") -> str:
    text = str(value).strip().lower()
    if text not in CACHE_TYPES:
        raise BadOptionError([Option(option), f" must be one of {', '.join(CACHE_TYPES)}; got {value!r}."])
    return text


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
                          kv_cache_dtype=serving.kv_cache_dtype.value, block_size=serving.block_size)
        elif work.mode is not Mode.LOAD:
            shaped.update(batch_size=shape.batch_size, seq_len=shape.text_len, image_size=shape.image_size, device=self.hardware.device.value)
        if work.mode is Mode.INFERENCE:
            shaped["max_new_tokens"] = shape.max_new_tokens
        if work.mode is Mode.TRAINING:
            shaped.update(optimizer=training.optimizer.value, pure_16bit=training.pure_16bit, gradient_checkpointing=training.gradient_checkpointing)
            if training.lora_rank is not None:
                shaped.update(lora_rank=training.lora_rank, lora_targets=list(training.lora_targets) if training.lora_targets else None)
        if self.hardware.gpu is not None:
            shaped["gpu"] = self.hardware.gpu
        if self.hardware.gpu_memory is not None:
            shaped["gpu_memory"] = self.hardware.gpu_memory
        if self.parallel.strategy is not None:
            shaped.update(gpus=self.parallel.gpus, nodes=self.parallel.nodes, strategy=self.parallel.strategy.value,
                          offload=self.parallel.offload.value)
        return shaped


BNB_COMPUTE_DTYPES = (DType.FLOAT32, DType.FLOAT16, DType.BFLOAT16)


def parse_bnb_compute_dtype(value: object) -> DType | None:
    """``None`` (transformers' ``dtype="auto"``) or the ``dtype=`` an int8/int4 load passes: float32, float16, bfloat16."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "auto")):
        return None
    dtype = DType.parse(value, option="bnb_compute_dtype")
    if dtype not in BNB_COMPUTE_DTYPES:
        raise BadOptionError([Option("bnb_compute_dtype"), f" must be one of float32, float16, bfloat16 (or auto); got {value!r}."])
    return dtype


def parse_fraction(value: object, *, option: str) -> float:
    """A number in (0, 1], such as vLLM's ``gpu_memory_utilization``."""
    try:
        number = float(str(value).strip()) if not isinstance(value, (int, float)) or isinstance(value, bool) else float(value)
    except ValueError:
        number = float("nan")
    if isinstance(value, bool) or not 0 < number <= 1:  # NaN fails this too
        raise BadOptionError([Option(option), f" must be a fraction of the GPU's memory, more than 0 and at most 1; got {value!r}."])
    return number


def _optional_int(value: object, *, option: str, minimum: int = 1, maximum: int = 1 << 30) -> int | None:
    return None if value is None or value == "" else positive_int(value, option=option, minimum=minimum, maximum=maximum)


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
    gradient_checkpointing: bool = False, lora_rank: object = None, lora_targets: object = None, gpu: str | None = None,
    trust_remote_code: bool = False, bnb_compute_dtype: object = None, gpu_memory: object = None, ctx: object = None,
    cache_type: object = "f16", cache_type_v: object = None, flash_attn: object = "auto", n_gpu_layers: object = None,
    gguf_file: object = None, gpu_memory_utilization: object = 0.9, max_model_len: object = None, max_num_seqs: object = None,
    max_num_batched_tokens: object = None, kv_cache_dtype: object = "auto", block_size: object = 16, gpus: object = 1,
    nodes: object = 1, strategy: object = None, offload: object = "none",
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
            ),
        ),
        hardware=HardwareSpec(device=Device.parse(device, option="device"), gpu=str(gpu).strip() or None if gpu else None,
                              gpu_memory=str(gpu_memory).strip() or None if gpu_memory else None),
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
    _check_parallel(options)
    training = options.work.training
    if training.lora_targets is not None and training.lora_rank is None:
        raise BadOptionError([Option("lora_targets"), " needs ", Option("lora_rank"), " (the LoRA rank, e.g. 16)."])


_TRAINING_STRATEGIES = "ddp, zero1, zero2, zero3 or fsdp"


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
