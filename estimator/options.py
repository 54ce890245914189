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
from dataclasses import dataclass
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
class WorkSpec:
    """The workload: load only, an inference step, or a training step, and its shape."""

    mode: Mode = Mode.LOAD
    shape: InputShape = InputShape()
    training: TrainingSpec = TrainingSpec()


@dataclass(frozen=True)
class HardwareSpec:
    """Where it runs: the device whose kernels are modelled, and a GPU to fit on."""

    device: Device = Device.CUDA
    gpu: str | None = None


@dataclass(frozen=True)
class Options:
    """Every option of a request, parsed and validated once; hashable, so it is its own cache key."""

    load: LoadSpec = LoadSpec()
    work: WorkSpec = WorkSpec()
    hardware: HardwareSpec = HardwareSpec()

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
        if work.mode is not Mode.LOAD:
            shaped.update(batch_size=shape.batch_size, seq_len=shape.text_len, image_size=shape.image_size, device=self.hardware.device.value)
        if work.mode is Mode.INFERENCE:
            shaped["max_new_tokens"] = shape.max_new_tokens
        if work.mode is Mode.TRAINING:
            shaped.update(optimizer=training.optimizer.value, pure_16bit=training.pure_16bit, gradient_checkpointing=training.gradient_checkpointing)
            if training.lora_rank is not None:
                shaped.update(lora_rank=training.lora_rank, lora_targets=list(training.lora_targets) if training.lora_targets else None)
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
    trust_remote_code: bool = False, bnb_compute_dtype: object = None,
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
        ),
        hardware=HardwareSpec(device=Device.parse(device, option="device"), gpu=gpu or None),
    )
    check_supported(options)
    return options


def check_supported(options: Options) -> None:
    """Refuse, before any work, the options this version cannot answer (with what to use instead)."""
    if options.hardware.gpu is not None:
        raise UnsupportedError([Option("gpu"), " is not available yet."])
    training = options.work.training
    if training.lora_targets is not None and training.lora_rank is None:
        raise BadOptionError([Option("lora_targets"), " needs ", Option("lora_rank"), " (the LoRA rank, e.g. 16)."])
