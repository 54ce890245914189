"""The form's state, and share links: query parameters in, query parameters out.

The share-link parameters are part of the public contract (``CONTRACT.md``, "Share links"):
``model, revision, library, dtypes, mode, batch, seq, image, new_tokens, device, optimizer,
pure16, checkpointing, lora, lora_targets, gpu, gpu_memory, ctx, cache_type, n_gpu_layers, gguf_file,
gpu_memory_utilization, max_model_len, max_num_seqs, max_num_batched_tokens, kv_cache_dtype, block_size,
gpus, nodes, strategy, offload``. :func:`to_query` spells out every one of them,
so a link still means the same thing if a default changes; ``auto`` (seq, image) means "the
model's own or the documented default", ``none`` (lora, gpu) means "not used", an empty
``lora_targets`` means peft's default targets. :func:`from_query` never raises: an unknown or
malformed parameter is ignored and reported in the returned notices.

The page reads models from the Hub only (:func:`hub_reference`): a path, typed or in a link, is
refused with one message that says nothing about the server's disk, which is never looked at.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlencode

from estimator.errors import BadReferenceError
from estimator.fit.gpus import GPU_NAMES
from estimator.options import CACHE_TYPES, DEFAULT_DTYPES, Device, DType, Library, Mode, Offload, Optimizer, Strategy
from estimator.source import hub
from estimator.source.reference import ModelRef, is_path_like, parse_hub_reference
from estimator_app.fields import FIELDS, OPTIONS, short_label

LIBRARIES: tuple[str, ...] = tuple(m.value for m in Library)
DTYPES: tuple[str, ...] = tuple(m.value for m in DType)
MODES: tuple[str, ...] = tuple(m.value for m in Mode)
DEVICES: tuple[str, ...] = tuple(m.value for m in Device)
OPTIMIZERS: tuple[str, ...] = tuple(m.value for m in Optimizer)

PARAMS: tuple[str, ...] = FIELDS  # the share link's parameters are the form's fields, in the same order
# Parameters that Gradio itself or the Spaces embed add to a page URL; ignored without a notice.
_FOREIGN = re.compile(r"^(__.*|view|logs|embed|theme)$")
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
          "block_size": (1, 1 << 10), "gpus": (1, 1 << 16), "nodes": (1, 1 << 16)}
STRATEGIES = ("none", *(m.value for m in Strategy))
OFFLOADS: tuple[str, ...] = tuple(m.value for m in Offload)
KV_CACHE_DTYPES = ("auto", "fp8")


def canonical_dtypes(dtypes: Iterable[str]) -> tuple[str, ...]:
    """The dtypes asked for, in the checkboxes' order (:data:`DTYPES`): the page's one order.

    Rows, downloads, the share link, a post's title and the chart all follow it, whatever order the
    boxes were ticked in or a link spelled. The core keeps "the order given" (the CLI's contract), so
    the page sorts before it calls the core.
    """
    asked = set(dtypes)
    return tuple(d for d in DTYPES if d in asked)


@dataclass(frozen=True)
class FormState:
    """Everything the form holds. ``None`` for seq/image means "auto", for lora/gpu "not used", for lora_targets peft's defaults."""

    model: str = ""
    revision: str = "main"
    library: str = "auto"
    dtypes: tuple[str, ...] = tuple(d.value for d in DEFAULT_DTYPES)
    mode: str = "load"
    batch: int = 1
    seq: int | None = None
    image: int | None = None
    new_tokens: int = 0
    device: str = "cuda"
    optimizer: str = "adamw"
    pure16: bool = False
    checkpointing: bool = False
    lora: int | None = None
    lora_targets: tuple[str, ...] | None = None
    gpu: str | None = None
    gpu_memory: str | None = None
    ctx: int | None = None
    cache_type: str = "f16"
    n_gpu_layers: int | None = None  # None: auto (as many as fit); -1: all
    gguf_file: str | None = None
    gpu_memory_utilization: float = 0.9
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    kv_cache_dtype: str = "auto"
    block_size: int = 16
    gpus: int = 1
    nodes: int = 1
    strategy: str = "none"
    offload: str = "none"

    def __post_init__(self) -> None:
        object.__setattr__(self, "dtypes", canonical_dtypes(self.dtypes))

    def estimate_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for :func:`estimator.estimate`, one per field that sets a core option
        (:data:`~estimator_app.fields.OPTIONS`). A GPU is not passed for a CPU run (the page then
        shows no GPU at all), nor in load mode with a listed GPU (the fits-on table answers it).

        Never ``trust_remote_code``: the hosted app does not run a repo's code.
        """
        kwargs = {keyword: SPECS[name].to_core(getattr(self, name)) for keyword, name in OPTIONS.items() if name in SPECS and SPECS[name].core}
        if self.device == "cpu":
            kwargs.update(gpu=None, gpu_memory=None)
        elif self.gpu_memory is not None:
            kwargs["gpu"] = None  # the memory typed is the more specific answer
        return kwargs


def hub_reference(model: str, revision: str | None = None) -> ModelRef:
    """``model`` as a Hub repo id or Hub URL, parsed without looking at the disk (the core never sees the text).

    Raises :class:`~estimator.errors.BadReferenceError`: for any path, :data:`HUB_ONLY`, the same
    whether or not it exists here; for other text, the core's own message.
    """
    if is_path_like(model):
        raise BadReferenceError(HUB_ONLY)
    return parse_hub_reference(model, revision=revision, endpoint=hub.endpoint() if "://" in model else None)


@dataclass
class Parsed:
    """What :func:`from_query` found: the state and one notice per ignored parameter."""

    state: FormState
    notices: list[str] = field(default_factory=list)
    given: bool = False  # at least one contract parameter was present


def _int(value: str, name: str) -> int:
    lo, hi = LIMITS[name]
    if not re.fullmatch(r"\s*\d{1,9}\s*", value):
        raise ValueError(f"expected a whole number from {lo} to {hi:,}")
    number = int(value)
    if not lo <= number <= hi:
        raise ValueError(f"expected a whole number from {lo} to {hi:,}")
    return number


def _choice(value: str, choices: tuple[str, ...]) -> str:
    text = value.strip().lower().replace("_", "-")
    for choice in choices:
        if text == choice.replace("_", "-"):
            return choice
    raise ValueError("expected one of " + ", ".join(choices))


def _flag(value: str) -> bool:
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


def _optional_int(value: str, name: str, empty: str) -> int | None:
    return None if value.strip().lower() in (empty, "") else _int(value, name)


def _model(value: str) -> str:
    text = value.strip()
    if not text or len(text) > _MODEL_MAX or any(c.isspace() or ord(c) < 32 for c in text):
        raise ValueError("expected a Hub model id or Hub URL")
    try:
        hub_reference(text)
    except BadReferenceError:
        raise ValueError("expected a Hub model id or Hub URL" + ("; this page does not read folders" if is_path_like(text) else "")) from None
    return text


def _model_typed(value: Any) -> str:
    model = (value or "").strip()
    if not model:
        raise ValueError("Type a model id (for example openai-community/gpt2) or a Hub URL, or click an example.")
    try:
        hub_reference(model)
    except BadReferenceError as exc:
        raise ValueError(exc.message) from None
    return str(model)


def _revision(value: str) -> str:
    text = value.strip() or "main"
    if not _REVISION.match(text) or ".." in text:
        raise ValueError("expected a branch, tag or commit")
    return text


def _dtypes(value: str, notices: list[str]) -> tuple[str, ...]:
    kept: list[str] = []
    for part in value.replace(" ", ",").split(","):
        if not part:
            continue
        try:
            dtype = _choice(part, DTYPES)
        except ValueError:
            notices.append(f"Ignored dtype {part[:40]!r} in 'dtypes' (expected any of {', '.join(DTYPES)}).")
            continue
        if dtype not in kept:
            kept.append(dtype)
    if not kept:
        raise ValueError("expected a comma-separated list of " + ", ".join(DTYPES))
    return canonical_dtypes(kept)


def _dtypes_ticked(value: Any) -> tuple[str, ...]:
    chosen = canonical_dtypes(d for d in (value or ()) if d in DTYPES)
    if not chosen:
        raise ValueError("Tick at least one dtype.")
    return chosen


def _gpu(value: str) -> str | None:
    text = value.strip()
    if text.lower() in ("", "none"):
        return None
    for gpu in GPU_NAMES:
        if text.lower() == gpu.lower():
            return gpu
    raise ValueError("expected one of " + ", ".join(GPU_NAMES))


def _gpu_memory(value: Any) -> str | None:
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


def _gpu_layers(value: Any) -> int | None:
    text = str(value if value is not None else "").strip().lower()
    if text in ("", "auto", "none"):
        return None
    if text in ("all", "-1"):
        return -1
    if text.isdigit() and int(text) <= 1 << 20:
        return int(text)
    raise ValueError(f"{short_label('n_gpu_layers')} must be auto, all or a whole number of layers; got {text[:40]!r}.")


_GGUF_FILE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$")


def _utilization(value: Any) -> float:
    try:
        number = float(str(value).strip())
    except ValueError:
        number = -1.0
    if not 0 < number <= 1:
        raise ValueError(f"{short_label('gpu_memory_utilization')} must be a number above 0 and at most 1, e.g. 0.9; got {str(value)[:20]!r}.")
    return number


def _gguf_file(value: Any) -> str | None:
    text = str(value or "").strip()
    if not text:
        return None
    if not _GGUF_FILE.match(text) or ".." in text:
        raise ValueError(f"{short_label('gguf_file')} must be a file name of the repo (letters, digits, . _ - /) or a "
                         f"quantization such as Q4_K_M; got {text[:40]!r}.")
    return text


def _whole(value: Any, name: str, zero_is_none: bool = False) -> int | None:
    """A Gradio number (float or None) as a whole number in :data:`LIMITS`; 0 means none where ``zero_is_none``."""
    if value is None or value == "":
        return None if zero_is_none else LIMITS[name][0]
    try:
        number = float(value)
        if number != int(number):
            raise ValueError
        if zero_is_none and int(number) == 0:
            return None
        return _int(str(int(number)), name)
    except (ValueError, OverflowError):
        lo, hi = LIMITS[name]
        lo = 0 if zero_is_none else lo
        raise ValueError(f"{short_label(name)} must be a whole number from {lo} to {hi:,}; got {value}.") from None


def _targets_typed(value: Any) -> tuple[str, ...] | None:
    try:
        return lora_targets(None if value is None else str(value))
    except ValueError:
        shown = str(value).strip()
        shown = shown if len(shown) <= 40 else shown[:40] + "…"
        raise ValueError(
            f"{short_label('lora_targets')} must be module names (letters, digits, _ . -) separated by commas, at most "
            f"{TARGETS_MAX[0]} names and {TARGETS_MAX[1]} characters; got {shown!r}."
        ) from None


def _same(value: Any) -> Any:
    return value


@dataclass(frozen=True)
class Field:
    """How one form field's value travels: share link <-> :class:`FormState` <-> widget, and to the core.

    ``parse`` reads a link's text (``ValueError`` says what was expected; ``notices`` takes extra
    ones), ``show`` writes it back; ``read`` takes the widget's value (``ValueError`` worded for the
    page), ``widget`` gives it back; ``to_core`` makes the :func:`estimator.estimate` value, and
    ``core`` is false for a field the core never sees (``gpu``).
    """

    parse: Callable[[str, list[str]], Any]
    show: Callable[[Any], str]
    read: Callable[[Any], Any]
    widget: Callable[[Any], Any] = _same
    to_core: Callable[[Any], Any] = _same
    core: bool = True


def _choice_field(name: str, choices: tuple[str, ...]) -> Field:
    default = getattr(FormState(), name)
    return Field(parse=lambda v, _: _choice(v, choices), show=str, read=lambda v: _choice(v or default, choices))


def _number_field(name: str, empty: str | None = None) -> Field:
    """A whole number; with ``empty`` ("auto", "none") it is optional, 0 in the widget and ``empty`` in a link."""
    if empty is None:
        return Field(parse=lambda v, _: _int(v, name), show=str, read=lambda v: _whole(v, name))
    return Field(parse=lambda v, _: _optional_int(v, name, empty), show=lambda v: empty if v is None else str(v),
                 read=lambda v: _whole(v, name, zero_is_none=True), widget=lambda v: v or 0)


def _flag_field() -> Field:
    return Field(parse=lambda v, _: _flag(v), show=lambda v: "1" if v else "0", read=bool)


# Every field, by name, in :data:`~estimator_app.fields.FIELDS` order. Adding a field: its name,
# label and core keyword in ``fields.py``, its default in :class:`FormState`, one entry here, its
# widget in ``app.py`` (and its share-link parameter in CONTRACT.md).
SPECS: dict[str, Field] = {
    "model": Field(parse=lambda v, _: _model(v), show=str, read=_model_typed, core=False),
    "revision": Field(parse=lambda v, _: _revision(v), show=lambda v: v or "main", read=lambda v: (v or "").strip() or "main",
                      to_core=lambda v: None if v in ("", "main") else v),
    "library": _choice_field("library", LIBRARIES),
    "dtypes": Field(parse=_dtypes, show=",".join, read=_dtypes_ticked, widget=list, to_core=list),
    "mode": _choice_field("mode", MODES),
    "batch": _number_field("batch"),
    "seq": _number_field("seq", "auto"),
    "image": _number_field("image", "auto"),
    "new_tokens": _number_field("new_tokens"),
    "device": _choice_field("device", DEVICES),
    "optimizer": _choice_field("optimizer", OPTIMIZERS),
    "pure16": _flag_field(),
    "checkpointing": _flag_field(),
    "lora": _number_field("lora", "none"),
    # Passed even without a rank: the core then says the targets need one, in the page's words.
    "lora_targets": Field(parse=lambda v, _: lora_targets(v), show=lambda v: ",".join(v or ()), read=_targets_typed,
                          widget=lambda v: ",".join(v or ()), to_core=lambda v: ",".join(v) if v else None),
    "gpu": Field(parse=lambda v, _: _gpu(v), show=lambda v: "none" if v is None else v, read=lambda v: None if not v or v == "none" else v,
                 widget=lambda v: v or "none"),
    "gpu_memory": Field(parse=lambda v, _: _gpu_memory(v), show=lambda v: v or "none", read=_gpu_memory, widget=lambda v: v or ""),
    "ctx": _number_field("ctx", "auto"),
    "cache_type": _choice_field("cache_type", CACHE_TYPES),
    "n_gpu_layers": Field(parse=lambda v, _: _gpu_layers(v), show=lambda v: "auto" if v is None else "all" if v == -1 else str(v),
                          read=_gpu_layers, widget=lambda v: "auto" if v is None else "all" if v == -1 else str(v)),
    "gguf_file": Field(parse=lambda v, _: _gguf_file(v), show=lambda v: v or "", read=_gguf_file, widget=lambda v: v or ""),
    "gpu_memory_utilization": Field(parse=lambda v, _: _utilization(v), show=lambda v: f"{v:g}", read=_utilization),
    "max_model_len": _number_field("max_model_len", "auto"),
    "max_num_seqs": _number_field("max_num_seqs", "auto"),
    "max_num_batched_tokens": _number_field("max_num_batched_tokens", "auto"),
    "kv_cache_dtype": _choice_field("kv_cache_dtype", KV_CACHE_DTYPES),
    "block_size": _number_field("block_size"),
    "gpus": _number_field("gpus"),
    "nodes": _number_field("nodes"),
    "strategy": Field(parse=lambda v, _: _choice(v, STRATEGIES), show=str, read=lambda v: _choice(v or "none", STRATEGIES),
                      to_core=lambda v: None if v == "none" else v),
    "offload": _choice_field("offload", OFFLOADS),
}
assert tuple(SPECS) == FIELDS, "SPECS must list every field of fields.FIELDS, in that order"


def _parse_one(name: str, value: str, state: FormState, notices: list[str]) -> FormState:
    changes: dict[str, Any] = {name: SPECS[name].parse(value, notices)}
    return replace(state, **changes)


def from_query(params: Mapping[str, str] | list[tuple[str, str]]) -> Parsed:
    """Parse a page URL's query parameters into a :class:`FormState`; never raises.

    Each unknown, repeated or malformed parameter is ignored (the default stays) with a notice a
    person can act on. Parameters Gradio or the Spaces embed add (``__theme``, ``view``) are
    ignored silently.
    """
    items = list(params.items()) if isinstance(params, Mapping) else list(params)
    state = FormState()
    notices: list[str] = []
    seen: set[str] = set()
    given = False
    for raw_name, raw_value in items:
        name = str(raw_name)
        value = str(raw_value)
        if _FOREIGN.match(name):
            continue
        shown = name[:40]
        if name not in PARAMS:
            notices.append(f"Ignored unknown parameter {shown!r}.")
            continue
        if name in seen:
            notices.append(f"Ignored a repeated {shown!r}; the first one counts.")
            continue
        seen.add(name)
        given = True
        try:
            state = _parse_one(name, value, state, notices)
        except ValueError as exc:
            notices.append(f"Ignored {shown}={value[:40]!r}: {exc}.")
    return Parsed(state=state, notices=notices, given=given)


def to_query(state: FormState) -> str:
    """The query string that reproduces ``state``, every contract parameter spelled out, in contract order."""
    return urlencode([(name, SPECS[name].show(getattr(state, name))) for name in PARAMS], safe="/,:")


def share_link(base: str, state: FormState) -> str:
    """``base`` (the page URL without a query) with the query that reproduces ``state``."""
    return base.split("?", 1)[0].split("#", 1)[0] + "?" + to_query(state)


def from_form(*values: Any) -> FormState:
    """The state the form's widgets hold, given in :data:`~estimator_app.fields.FIELDS` order.

    Numbers arrive as float or None from Gradio; 0 means auto/none. Raises ``ValueError`` with a
    user-facing message for values the widgets should not allow (the first field at fault).
    """
    got = dict(zip(FIELDS, values, strict=True))
    changes = {name: SPECS[name].read(got[name]) for name in FIELDS}
    return FormState(**changes)


def to_fields(state: FormState) -> tuple[Any, ...]:
    """The widgets' values for ``state``, in :data:`~estimator_app.fields.FIELDS` order (0 means auto/none)."""
    return tuple(SPECS[name].widget(getattr(state, name)) for name in FIELDS)
