"""The form's values, one parser per kind: a share link's text in, a widget's value in, each checked.

Link parsers (``*_text``) take the text of a query parameter and raise ``ValueError`` saying what
was expected (:func:`estimator_app.form.from_query` turns that into a notice); widget readers take
what Gradio hands over (a float or None for a number) and raise ``ValueError`` worded for the page.
The vocabularies (:data:`DTYPES`, :data:`MODES`...) are the core's enums, as the widgets list them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from estimator.errors import BadReferenceError
from estimator.fit.gpus import GPU_NAMES
from estimator.options import (
    DTYPE_ALIASES,
    AttnImplementation,
    Device,
    DType,
    Library,
    Mode,
    Offload,
    Optimizer,
    ServingQuantization,
    Strategy,
    VLLMVersion,
)
from estimator.source import hub
from estimator.source.reference import ModelRef, is_path_like, parse_hub_reference
from estimator_app.fields import short_label

LIBRARIES: tuple[str, ...] = tuple(m.value for m in Library)
DTYPES: tuple[str, ...] = tuple(m.value for m in DType)
MODES: tuple[str, ...] = tuple(m.value for m in Mode)
DEVICES: tuple[str, ...] = tuple(m.value for m in Device)
OPTIMIZERS: tuple[str, ...] = tuple(m.value for m in Optimizer)

_REVISION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$")
_MODEL_MAX = 300
HUB_ONLY = (
    "This page reads models from the Hub only: type a Hub model id (for example openai-community/gpt2) or a "
    "Hub URL. Local folders work with the command line and the Python API."
)
_TARGET = re.compile(r"[A-Za-z0-9_.\-]+")
TARGETS_MAX = (20, 200)  # LoRA targets: at most this many module names, and characters in all
TARGETS_EXPECTED = (
    f"expected module names (letters, digits, _ . -) separated by commas, at most {TARGETS_MAX[0]} names and "
    f"{TARGETS_MAX[1]} characters"
)
LIMITS = {"batch": (1, 1 << 20), "seq": (1, 1 << 24), "image": (1, 1 << 16), "new_tokens": (0, 1 << 24), "lora": (1, 1 << 16),
          "ctx": (1, 1 << 24), "max_model_len": (1, 1 << 24), "max_num_seqs": (1, 1 << 20), "max_num_batched_tokens": (1, 1 << 24),
          "block_size": (1, 1 << 10), "gpus": (1, 1 << 16), "nodes": (1, 1 << 16), "tensor_parallel_size": (1, 1 << 10),
          "pipeline_parallel_size": (1, 1 << 10), "images": (1, 64), "audio": (1, 3600),
          "video": (1, 4096)}
STRATEGIES = ("none", *(m.value for m in Strategy))
OFFLOADS: tuple[str, ...] = tuple(m.value for m in Offload)
KV_CACHE_DTYPES = ("auto", "fp8")
SERVING_QUANTIZATIONS: tuple[str, ...] = tuple(m.value for m in ServingQuantization)
VLLM_VERSIONS: tuple[str, ...] = tuple(m.value for m in VLLMVersion)
ATTN_IMPLEMENTATIONS: tuple[str, ...] = ("auto", *(m.value for m in AttnImplementation))  # auto: transformers' default


def canonical_dtypes(dtypes: Iterable[str]) -> tuple[str, ...]:
    """The dtypes asked for, in the checkboxes' order (:data:`DTYPES`): the page's one order.

    Rows, downloads, the share link, a post's title and the chart all follow it, whatever order the
    boxes were ticked in or a link spelled. The core keeps "the order given" (the CLI's contract), so
    the page sorts before it calls the core.
    """
    asked = set(dtypes)
    return tuple(d for d in DTYPES if d in asked)



def hub_reference(model: str, revision: str | None = None) -> ModelRef:
    """``model`` as a Hub repo id or Hub URL, parsed without looking at the disk (the core never sees the text).

    Raises :class:`~estimator.errors.BadReferenceError`: for any path, :data:`HUB_ONLY`, the same
    whether or not it exists here; for other text, the core's own message.
    """
    if is_path_like(model):
        raise BadReferenceError(HUB_ONLY)
    return parse_hub_reference(model, revision=revision, endpoint=hub.endpoint() if "://" in model else None)



def whole_text(value: str, name: str) -> int:
    lo, hi = LIMITS[name]
    if not re.fullmatch(r"\s*\d{1,9}\s*", value):
        raise ValueError(f"expected a whole number from {lo} to {hi:,}")
    number = int(value)
    if not lo <= number <= hi:
        raise ValueError(f"expected a whole number from {lo} to {hi:,}")
    return number


def choice(value: str, choices: tuple[str, ...]) -> str:
    text = value.strip().lower().replace("_", "-")
    for choice in choices:
        if text == choice.replace("_", "-"):
            return choice
    raise ValueError("expected one of " + ", ".join(choices))


def flag(value: str) -> bool:
    text = value.strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off", ""):
        return False
    raise ValueError("expected 1 or 0")


def lora_targets(value: str | None) -> tuple[str, ...] | None:
    """``"q_proj, v_proj"`` -> ``("q_proj", "v_proj")``; empty -> ``None`` (peft's defaults).

    Names are separated by commas (spaces around them are dropped); repeats count once. Raises
    ``ValueError`` (:data:`TARGETS_EXPECTED`) for any other character, or too many names or characters.
    """
    text = (value or "").strip()
    if len(text) > TARGETS_MAX[1]:
        raise ValueError(TARGETS_EXPECTED)
    names = [part.strip() for part in text.split(",")]
    names = [name for name in names if name]
    if len(names) > TARGETS_MAX[0] or not all(_TARGET.fullmatch(name) for name in names):
        raise ValueError(TARGETS_EXPECTED)
    return tuple(dict.fromkeys(names)) or None


def optional_whole_text(value: str, name: str, empty: str) -> int | None:
    return None if value.strip().lower() in (empty, "") else whole_text(value, name)


def model_text(value: str) -> str:
    text = value.strip()
    if not text or len(text) > _MODEL_MAX or any(c.isspace() or ord(c) < 32 for c in text):
        raise ValueError("expected a Hub model id or Hub URL")
    try:
        hub_reference(text)
    except BadReferenceError:
        raise ValueError("expected a Hub model id or Hub URL" + ("; this page does not read folders" if is_path_like(text) else "")) from None
    return text


def model_typed(value: Any) -> str:
    model = (value or "").strip()
    if not model:
        raise ValueError("Type a model id (for example openai-community/gpt2) or a Hub URL, or click an example.")
    try:
        hub_reference(model)
    except BadReferenceError as exc:
        raise ValueError(exc.message) from None
    return str(model)


def revision(value: str) -> str:
    text = value.strip() or "main"
    if not _REVISION.match(text) or ".." in text:
        raise ValueError("expected a branch, tag or commit")
    return text


def dtypes_text(value: str, notices: list[str]) -> tuple[str, ...]:
    kept: list[str] = []
    for part in value.replace(" ", ",").split(","):
        if not part:
            continue
        try:
            dtype = choice(DTYPE_ALIASES.get(part.strip().lower().replace("_", "-"), part), DTYPES)  # bf16, fp16, 4bit...
        except ValueError:
            notices.append(f"Ignored dtype {part[:40]!r} in 'dtypes' (expected any of {', '.join(DTYPES)}).")
            continue
        if dtype not in kept:
            kept.append(dtype)
    if not kept:
        raise ValueError("expected a comma-separated list of " + ", ".join(DTYPES))
    return canonical_dtypes(kept)


def dtypes_ticked(value: Any) -> tuple[str, ...]:
    chosen = canonical_dtypes(d for d in (value or ()) if d in DTYPES)
    if not chosen:
        raise ValueError("Tick at least one dtype.")
    return chosen


def gpu_text(value: str) -> str | None:
    text = value.strip()
    if text.lower() in ("", "none"):
        return None
    for gpu in GPU_NAMES:
        if text.lower() == gpu.lower():
            return gpu
    raise ValueError("expected one of " + ", ".join(GPU_NAMES))


def gpu_memory(value: Any) -> str | None:
    from estimator.errors import BadOptionError
    from estimator.fit.gpus import parse_memory

    text = str(value or "").strip()
    if text.lower() in ("", "none"):
        return None
    try:
        parse_memory(text)
    except BadOptionError:
        raise ValueError(f"{short_label('gpu_memory')} must be a size such as 24GiB, 80GB or 16384MiB; got {text[:40]!r}.") from None
    return text


def gpu_layers(value: Any) -> int | None:
    text = str(value if value is not None else "").strip().lower()
    if text in ("", "auto", "none"):
        return None
    if text in ("all", "-1"):
        return -1
    if text.isdigit() and int(text) <= 1 << 20:
        return int(text)
    raise ValueError(f"{short_label('n_gpu_layers')} must be auto, all or a whole number of layers; got {text[:40]!r}.")


_GGUF_FILE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$")


def utilization(value: Any) -> float:
    try:
        number = float(str(value).strip())
    except ValueError:
        number = -1.0
    if not 0 < number <= 1:
        raise ValueError(f"{short_label('gpu_memory_utilization')} must be a number above 0 and at most 1, e.g. 0.9; got {str(value)[:20]!r}.")
    return number


def gguf_file(value: Any) -> str | None:
    text = str(value or "").strip()
    if not text:
        return None
    if not _GGUF_FILE.match(text) or ".." in text:
        raise ValueError(f"{short_label('gguf_file')} must be a file name of the repo (letters, digits, . _ - /) or a "
                         f"quantization such as Q4_K_M; got {text[:40]!r}.")
    return text


def whole(value: Any, name: str, zero_is_none: bool = False) -> int | None:
    """A Gradio number (float or None) as a whole number in :data:`LIMITS`; 0 means none where ``zero_is_none``."""
    if value is None or value == "":
        return None if zero_is_none else LIMITS[name][0]
    try:
        number = float(value)
        if number != int(number):
            raise ValueError
        if zero_is_none and int(number) == 0:
            return None
        return whole_text(str(int(number)), name)
    except (ValueError, OverflowError):
        lo, hi = LIMITS[name]
        lo = 0 if zero_is_none else lo
        raise ValueError(f"{short_label(name)} must be a whole number from {lo} to {hi:,}; got {value}.") from None


def targets_typed(value: Any) -> tuple[str, ...] | None:
    try:
        return lora_targets(None if value is None else str(value))
    except ValueError:
        shown = str(value).strip()
        shown = shown if len(shown) <= 40 else shown[:40] + "…"
        raise ValueError(
            f"{short_label('lora_targets')} must be module names (letters, digits, _ . -) separated by commas, at most "
            f"{TARGETS_MAX[0]} names and {TARGETS_MAX[1]} characters; got {shown!r}."
        ) from None


def same(value: Any) -> Any:
    return value

