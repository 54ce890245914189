"""The closed vocabularies (enums) of every option, and the parsers of single values.

Each parser raises :class:`~estimator.errors.BadOptionError` whose ``option`` names the option and
whose message lists the accepted values.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import TypeVar

from estimator.errors import BadOptionError, Option

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

    @classmethod
    def parse(cls, value: object, *, option: str) -> DType:
        """As :meth:`_Choice.parse`, also reading the short names people type (:data:`DTYPE_ALIASES`:
        ``bf16``, ``fp16``, ``fp32``, ``fp8``, ``nf4``/``4bit``, ``8bit``...)."""
        if isinstance(value, str):
            value = DTYPE_ALIASES.get(value.strip().lower().replace("_", "-"), value)
        try:
            return super().parse(value, option=option)
        except BadOptionError as exc:
            raise BadOptionError([*exc.parts, " Short names work too: bf16, fp16, fp32, fp8, 8bit, 4bit (nf4)."], option=option) from None

    @property
    def is_16bit(self) -> bool:
        return self in (DType.FLOAT16, DType.BFLOAT16)

    @property
    def is_quantized(self) -> bool:
        return self in (DType.FLOAT8, DType.INT8, DType.INT4)


DTYPE_ALIASES: dict[str, str] = {
    # short names of the float dtypes (torch's, numpy's and the usual shorthands)
    "fp32": "float32", "f32": "float32", "float": "float32",
    "fp16": "float16", "f16": "float16", "half": "float16",
    "bf16": "bfloat16",
    "fp8": "float8", "f8": "float8",
    # bitsandbytes' loads by the names its options use: load_in_8bit (LLM.int8()), load_in_4bit (nf4 or fp4)
    "8bit": "int8", "8-bit": "int8", "llm.int8": "int8",
    "4bit": "int4", "4-bit": "int4", "nf4": "int4", "fp4": "int4",
}
"""What each alias of :meth:`DType.parse` reads as (case and ``_``/``-`` ignored); the rows keep the canonical name."""


class Mode(_Choice):
    LOAD = "load"
    INFERENCE = "inference"
    TRAINING = "training"
    SERVING = "serving"  # a vLLM-style memory plan on one GPU (estimator.serving)


class KVCacheDType(_Choice):
    """vLLM's ``--kv-cache-dtype``: the model's dtype, or one byte per value."""

    AUTO = "auto"
    FP8 = "fp8"


class VLLMVersion(_Choice):
    """The vLLM version whose start-up accounting a serving plan follows (``--vllm-version``; only the minor
    version changes it: ``0.19.1`` is ``0.19``). The rules of each are in ``estimator/serving/versions.py``."""

    V0_19 = "0.19"

    @classmethod
    def parse_version(cls, value: object, *, option: str = "vllm_version") -> VLLMVersion:
        text = str(value).strip().lower().removeprefix("v")
        return cls.parse(".".join(text.split(".")[:2]) if text.count(".") >= 1 else text, option=option)


class ServingQuantization(_Choice):
    """vLLM's ``--quantization`` for a 16-bit checkpoint: none, or fp8 quantized while loading (a checkpoint's own
    ``quantization_config`` is read from it, not from this option)."""

    NONE = "none"
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
    # fixed-size per-sequence state of SSM / linear-attention layers (transformers' LinearAttentionLayer)
    CONV_STATE = "conv_state"  # conv_states: the last conv_kernel inputs of the causal convolution
    SSM_STATE = "ssm_state"  # recurrent_states: the SSM (Mamba) or delta-rule (gated DeltaNet) state
    # what a vision-language or speech model's image / audio encoder and its projector allocate in the forward
    ENCODER_ACTIVATIONS = "encoder_activations"


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
        raise BadOptionError([Option("dtypes"), " needs at least one of float32, float16, bfloat16, float8, int8, int4 "
                              "(or bf16, fp16, fp32, fp8, 8bit, 4bit/nf4)."])
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


class AttnImplementation(_Choice):
    """transformers' ``attn_implementation``: the attention kernel a simulated step runs (estimator.peak.kernels.attention)."""

    EAGER = "eager"
    SDPA = "sdpa"
    FLASH_ATTENTION_2 = "flash_attention_2"
    FLEX_ATTENTION = "flex_attention"


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
