"""The closed vocabularies of the estimator, parsed once at the boundary.

Every option the CLI, the app and the Python API accept is one of these enums; parsing
raises :class:`~estimator.errors.BadOptionError` with the accepted values in the message.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

from estimator.errors import BadOptionError


class _Choice(str, enum.Enum):
    """A str-valued enum whose ``parse`` names the accepted values on failure."""

    @classmethod
    def parse(cls, value: object, *, option: str) -> _Choice:
        if isinstance(value, cls):
            return value
        text = str(value).strip().lower().replace("_", "-")
        for member in cls:
            if text in (member.value, member.value.replace("_", "-")):
                return member
        choices = ", ".join(m.value for m in cls)
        raise BadOptionError(f"--{option} must be one of {choices}; got {value!r}.")

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
    parsed: list[DType] = []
    for value in values:
        for part in str(value).replace(",", " ").split():
            dtype = DType.parse(part, option="dtypes")
            assert isinstance(dtype, DType)
            if dtype not in parsed:
                parsed.append(dtype)
    if not parsed:
        raise BadOptionError("--dtypes needs at least one of float32, float16, bfloat16, float8, int8, int4.")
    return tuple(parsed)


def positive_int(value: object, *, option: str, minimum: int = 1, maximum: int = 1 << 40) -> int:
    """Parse an integer option within [minimum, maximum]; booleans and floats with a fraction are refused."""
    if isinstance(value, bool):
        raise BadOptionError(f"--{option} must be an integer; got {value!r}.")
    try:
        number = int(str(value).strip()) if not isinstance(value, int) else value
    except ValueError:
        raise BadOptionError(f"--{option} must be an integer; got {value!r}.") from None
    if not minimum <= number <= maximum:
        raise BadOptionError(f"--{option} must be between {minimum} and {maximum:,}; got {number:,}.")
    return number
