"""The form's state, and share links: query parameters in, query parameters out.

The share-link parameters are part of the public contract (``CONTRACT.md``, "Share links"):
``model, revision, library, dtypes, mode, batch, seq, image, new_tokens, device, optimizer,
pure16, checkpointing, lora, lora_targets, gpu``. :func:`to_query` spells out every one of them,
so a link still means the same thing if a default changes; ``auto`` (seq, image) means "the
model's own or the documented default", ``none`` (lora, gpu) means "not used", an empty
``lora_targets`` means peft's default targets. :func:`from_query` never raises: an unknown or
malformed parameter is ignored and reported in the returned notices.

The page reads models from the Hub only (:func:`hub_reference`): a path, typed or in a link, is
refused with one message that says nothing about the server's disk, which is never looked at.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlencode

from estimator.errors import BadReferenceError
from estimator.fit.gpus import GPU_NAMES
from estimator.options import DEFAULT_DTYPES, Device, DType, Library, Mode, Optimizer
from estimator.source import hub
from estimator.source.reference import ModelRef, is_path_like, parse_hub_reference
from estimator_app.fields import FIELDS, short_label

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
LIMITS = {"batch": (1, 1 << 20), "seq": (1, 1 << 24), "image": (1, 1 << 16), "new_tokens": (0, 1 << 24), "lora": (1, 1 << 16)}


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

    def estimate_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for :func:`estimator.estimate` (``gpu`` stays in the app's own table).

        Never ``trust_remote_code``: the hosted app does not run a repo's code.
        """
        return {
            "revision": None if self.revision in ("", "main") else self.revision,
            "library": self.library,
            "dtypes": list(self.dtypes),
            "mode": self.mode,
            "batch_size": self.batch,
            "seq_len": self.seq,
            "image_size": self.image,
            "max_new_tokens": self.new_tokens,
            "device": self.device,
            "optimizer": self.optimizer,
            "pure_16bit": self.pure16,
            "gradient_checkpointing": self.checkpointing,
            "lora_rank": self.lora,
            # Passed even without a rank: the core then says the targets need one, in the page's words.
            "lora_targets": ",".join(self.lora_targets) if self.lora_targets else None,
        }


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
        if text == choice:
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


def _parse_one(name: str, value: str, state: FormState, notices: list[str]) -> FormState:
    if name == "model":
        text = value.strip()
        if not text or len(text) > _MODEL_MAX or any(c.isspace() or ord(c) < 32 for c in text):
            raise ValueError("expected a Hub model id or Hub URL")
        try:
            hub_reference(text)
        except BadReferenceError:
            raise ValueError("expected a Hub model id or Hub URL" + ("; this page does not read folders" if is_path_like(text) else "")) from None
        return replace(state, model=text)
    if name == "revision":
        text = value.strip() or "main"
        if not _REVISION.match(text) or ".." in text:
            raise ValueError("expected a branch, tag or commit")
        return replace(state, revision=text)
    if name == "dtypes":
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
        return replace(state, dtypes=tuple(kept))
    if name == "library":
        return replace(state, library=_choice(value, LIBRARIES))
    if name == "mode":
        return replace(state, mode=_choice(value, MODES))
    if name == "device":
        return replace(state, device=_choice(value, DEVICES))
    if name == "optimizer":
        return replace(state, optimizer=_choice(value, OPTIMIZERS))
    if name in ("batch", "new_tokens"):
        changes: dict[str, Any] = {name: _int(value, name)}
        return replace(state, **changes)
    if name in ("seq", "image"):
        changes = {name: _optional_int(value, name, "auto")}
        return replace(state, **changes)
    if name == "lora":
        return replace(state, lora=_optional_int(value, name, "none"))
    if name == "lora_targets":
        return replace(state, lora_targets=lora_targets(value))
    if name in ("pure16", "checkpointing"):
        changes = {name: _flag(value)}
        return replace(state, **changes)
    if name == "gpu":
        text = value.strip()
        if text.lower() in ("", "none"):
            return replace(state, gpu=None)
        for gpu in GPU_NAMES:
            if text.lower() == gpu.lower():
                return replace(state, gpu=gpu)
        raise ValueError("expected one of " + ", ".join(GPU_NAMES))
    raise AssertionError(name)


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
    values = {
        "model": state.model,
        "revision": state.revision or "main",
        "library": state.library,
        "dtypes": ",".join(state.dtypes),
        "mode": state.mode,
        "batch": str(state.batch),
        "seq": "auto" if state.seq is None else str(state.seq),
        "image": "auto" if state.image is None else str(state.image),
        "new_tokens": str(state.new_tokens),
        "device": state.device,
        "optimizer": state.optimizer,
        "pure16": "1" if state.pure16 else "0",
        "checkpointing": "1" if state.checkpointing else "0",
        "lora": "none" if state.lora is None else str(state.lora),
        "lora_targets": ",".join(state.lora_targets or ()),
        "gpu": "none" if state.gpu is None else state.gpu,
    }
    return urlencode([(name, values[name]) for name in PARAMS], safe="/,:")


def share_link(base: str, state: FormState) -> str:
    """``base`` (the page URL without a query) with the query that reproduces ``state``."""
    return base.split("?", 1)[0].split("#", 1)[0] + "?" + to_query(state)


def from_form(*values: Any) -> FormState:
    """The state the form's widgets hold, given in :data:`~estimator_app.fields.FIELDS` order.

    Numbers arrive as float or None from Gradio; 0 means auto/none. Raises ``ValueError`` with a
    user-facing message for values the widgets should not allow.
    """
    got = dict(zip(FIELDS, values, strict=True))
    model, revision, library, dtypes, mode = got["model"], got["revision"], got["library"], got["dtypes"], got["mode"]
    device, optimizer, gpu = got["device"], got["optimizer"], got["gpu"]

    def whole(value: Any, name: str, zero_is_none: bool = False) -> int | None:
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

    def targets(value: Any) -> tuple[str, ...] | None:
        try:
            return lora_targets(None if value is None else str(value))
        except ValueError:
            shown = str(value).strip()
            shown = shown if len(shown) <= 40 else shown[:40] + "…"
            raise ValueError(
                f"{short_label('lora_targets')} must be module names (letters, digits, _ . -) separated by commas, at most "
                f"{TARGETS_MAX[0]} names and {TARGETS_MAX[1]} characters; got {shown!r}."
            ) from None

    model = (model or "").strip()
    if not model:
        raise ValueError("Type a model id (for example openai-community/gpt2) or a Hub URL, or click an example.")
    try:
        hub_reference(model)
    except BadReferenceError as exc:
        raise ValueError(exc.message) from None
    chosen = tuple(dict.fromkeys(d for d in (dtypes or ()) if d in DTYPES))  # rows in the order given, as the CLI
    if not chosen:
        raise ValueError("Tick at least one dtype.")
    return FormState(
        model=model,
        revision=(revision or "").strip() or "main",
        library=_choice(library or "auto", LIBRARIES),
        dtypes=chosen,
        mode=_choice(mode or "load", MODES),
        batch=whole(got["batch"], "batch") or 1,
        seq=whole(got["seq"], "seq", zero_is_none=True),
        image=whole(got["image"], "image", zero_is_none=True),
        new_tokens=whole(got["new_tokens"], "new_tokens") or 0,
        device=_choice(device or "cuda", DEVICES),
        optimizer=_choice(optimizer or "adamw", OPTIMIZERS),
        pure16=bool(got["pure16"]),
        checkpointing=bool(got["checkpointing"]),
        lora=whole(got["lora"], "lora", zero_is_none=True),
        lora_targets=targets(got["lora_targets"]),
        gpu=None if not gpu or gpu == "none" else gpu,
    )


def to_fields(state: FormState) -> tuple[Any, ...]:
    """The widgets' values for ``state``, in :data:`~estimator_app.fields.FIELDS` order (0 means auto/none)."""
    values = {
        "model": state.model,
        "revision": state.revision,
        "library": state.library,
        "dtypes": list(state.dtypes),
        "mode": state.mode,
        "batch": state.batch,
        "seq": state.seq or 0,
        "image": state.image or 0,
        "new_tokens": state.new_tokens,
        "device": state.device,
        "optimizer": state.optimizer,
        "pure16": state.pure16,
        "checkpointing": state.checkpointing,
        "lora": state.lora or 0,
        "lora_targets": ",".join(state.lora_targets or ()),
        "gpu": state.gpu or "none",
    }
    return tuple(values[name] for name in FIELDS)
