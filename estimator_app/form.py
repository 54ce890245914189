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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlencode

from estimator.options import CACHE_TYPES, DEFAULT_DTYPES
from estimator_app import values, whatfits
from estimator_app.fields import FIELDS, OPTIONS, short_label
from estimator_app.values import (  # noqa: F401  - the page's names, kept here for their callers
    ATTN_IMPLEMENTATIONS,
    DEVICES,
    DTYPES,
    HUB_ONLY,
    KV_CACHE_DTYPES,
    LIBRARIES,
    LIMITS,
    MODES,
    OFFLOADS,
    OPTIMIZERS,
    SERVING_QUANTIZATIONS,
    STRATEGIES,
    TARGETS_EXPECTED,
    TARGETS_MAX,
    VLLM_VERSIONS,
    canonical_dtypes,
    hub_reference,
    lora_targets,
)

PAGE_DTYPES: tuple[str, ...] = ("float32", "bfloat16", "int8", "int4")  # ticked when the page opens with no link
STRATEGY_CHOICES: tuple[str, ...] = tuple(s for s in STRATEGIES if s != "tp")  # tp is the "Tensor parallel size" field
PARAMS: tuple[str, ...] = FIELDS  # the share link's parameters are the form's fields, in the same order
# Parameters that Gradio itself or the Spaces embed add to a page URL; ignored without a notice.
_FOREIGN = re.compile(r"^(__.*|view|logs|embed|theme)$")


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
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    quantization: str = "none"
    vllm_version: str = VLLM_VERSIONS[-1]
    images: int | None = None  # None: the core's default (1 image for a vision-language model)
    audio: int | None = None  # seconds; None: the feature extractor's window
    video: int | None = None  # frames of one video per prompt; None: no video
    attn: str = "auto"  # the attention kernel; auto: transformers' default for the model

    def __post_init__(self) -> None:
        object.__setattr__(self, "dtypes", canonical_dtypes(self.dtypes))
        if self.strategy == "tp" and self.tensor_parallel_size == 1:
            # One tensor-parallel control: an older link's ``strategy=tp&gpus=N`` is ``tensor_parallel_size=N``
            # (the same answer: :meth:`estimate_kwargs` asks the core for strategy tp over N GPUs in inference).
            for name, value in (("tensor_parallel_size", self.gpus), ("gpus", 1), ("strategy", "none")):
                object.__setattr__(self, name, value)

    @property
    def world_size(self) -> int:
        """The GPUs the figures are per GPU of (1: one GPU)."""
        if self.mode == "serving" or (self.mode == "inference" and self.strategy == "none"):
            return self.tensor_parallel_size * (self.pipeline_parallel_size if self.mode == "serving" else 1)
        return self.gpus * self.nodes if self.strategy != "none" else 1

    def estimate_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for :func:`estimator.estimate`, one per field that sets a core option
        (:data:`~estimator_app.fields.OPTIONS`). A GPU is not passed for a CPU run (the page then
        shows no GPU at all), nor in load mode with a listed GPU (the fits-on table answers it).

        Never ``trust_remote_code``: the hosted app does not run a repo's code.
        """
        kwargs = {keyword: SPECS[name].to_core(getattr(self, name)) for keyword, name in OPTIONS.items() if name in SPECS and SPECS[name].core}
        if self.mode == "inference" and self.tensor_parallel_size > 1 and self.strategy == "none":
            # the one tensor-parallel control: inference over N GPUs is the core's strategy tp (vLLM's size is serving's)
            kwargs.update(strategy="tp", gpus=self.tensor_parallel_size, tensor_parallel_size=1)
        if self.device == "cpu":
            kwargs.update(gpu=None, gpu_memory=None)
        elif self.gpu_memory is not None:
            kwargs["gpu"] = None  # the memory typed is the more specific answer
        return kwargs



@dataclass
class Parsed:
    """What :func:`from_query` found: the state and one notice per ignored parameter."""

    state: FormState
    notices: list[str] = field(default_factory=list)
    given: bool = False  # at least one contract parameter was present


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
    widget: Callable[[Any], Any] = values.same
    to_core: Callable[[Any], Any] = values.same
    core: bool = True


def _choice_field(name: str, choices: tuple[str, ...]) -> Field:
    default = getattr(FormState(), name)
    return Field(parse=lambda v, _: values.choice(v, choices), show=str, read=lambda v: values.choice(v or default, choices))


def _number_field(name: str, empty: str | None = None) -> Field:
    """A whole number; with ``empty`` ("auto", "none") it is optional, 0 in the widget and ``empty`` in a link."""
    if empty is None:
        return Field(parse=lambda v, _: values.whole_text(v, name), show=str, read=lambda v: values.whole(v, name))
    return Field(parse=lambda v, _: values.optional_whole_text(v, name, empty), show=lambda v: empty if v is None else str(v),
                 read=lambda v: values.whole(v, name, zero_is_none=True), widget=lambda v: v or 0)


def _flag_field() -> Field:
    return Field(parse=lambda v, _: values.flag(v), show=lambda v: "1" if v else "0", read=bool)


# Every field, by name, in :data:`~estimator_app.fields.FIELDS` order. Adding a field: its name,
# label and core keyword in ``fields.py``, its default in :class:`FormState`, one entry here, its
# widget in ``layout.py`` (and its share-link parameter in CONTRACT.md).
SPECS: dict[str, Field] = {
    "model": Field(parse=lambda v, _: values.model_text(v), show=str, read=values.model_typed, core=False),
    "revision": Field(parse=lambda v, _: values.revision(v), show=lambda v: v or "main", read=lambda v: (v or "").strip() or "main",
                      to_core=lambda v: None if v in ("", "main") else v),
    "library": _choice_field("library", LIBRARIES),
    "dtypes": Field(parse=values.dtypes_text, show=",".join, read=values.dtypes_ticked, widget=list, to_core=list),
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
    "lora_targets": Field(parse=lambda v, _: values.lora_targets(v), show=lambda v: ",".join(v or ()), read=values.targets_typed,
                          widget=lambda v: ",".join(v or ()), to_core=lambda v: ",".join(v) if v else None),
    "gpu": Field(parse=lambda v, _: values.gpu_text(v), show=lambda v: "none" if v is None else v, read=lambda v: None if not v or v == "none" else v,
                 widget=lambda v: v or "none"),
    "gpu_memory": Field(parse=lambda v, _: values.gpu_memory(v), show=lambda v: v or "none", read=values.gpu_memory, widget=lambda v: v or ""),
    "ctx": _number_field("ctx", "auto"),
    "cache_type": _choice_field("cache_type", CACHE_TYPES),
    "n_gpu_layers": Field(parse=lambda v, _: values.gpu_layers(v), show=lambda v: "auto" if v is None else "all" if v == -1 else str(v),
                          read=values.gpu_layers, widget=lambda v: "auto" if v is None else "all" if v == -1 else str(v)),
    "gguf_file": Field(parse=lambda v, _: values.gguf_file(v), show=lambda v: v or "", read=values.gguf_file, widget=lambda v: v or ""),
    "gpu_memory_utilization": Field(parse=lambda v, _: values.utilization(v), show=lambda v: f"{v:g}", read=values.utilization),
    "max_model_len": _number_field("max_model_len", "auto"),
    "max_num_seqs": _number_field("max_num_seqs", "auto"),
    "max_num_batched_tokens": _number_field("max_num_batched_tokens", "auto"),
    "kv_cache_dtype": _choice_field("kv_cache_dtype", KV_CACHE_DTYPES),
    "block_size": _number_field("block_size"),
    "gpus": _number_field("gpus"),
    "nodes": _number_field("nodes"),
    "strategy": Field(parse=lambda v, _: values.choice(v, STRATEGIES), show=str, read=lambda v: values.choice(v or "none", STRATEGIES),
                      to_core=lambda v: None if v == "none" else v),
    "offload": _choice_field("offload", OFFLOADS),
    "tensor_parallel_size": _number_field("tensor_parallel_size"),
    "pipeline_parallel_size": _number_field("pipeline_parallel_size"),
    "quantization": _choice_field("quantization", SERVING_QUANTIZATIONS),
    "vllm_version": _choice_field("vllm_version", VLLM_VERSIONS),
    "images": _number_field("images", "auto"),
    "audio": _number_field("audio", "auto"),
    "video": _number_field("video", "none"),
    "attn": Field(parse=lambda v, _: values.choice(v, ATTN_IMPLEMENTATIONS), show=str,
                  read=lambda v: values.choice(v or "auto", ATTN_IMPLEMENTATIONS), to_core=lambda v: None if v == "auto" else v),
}
assert tuple(SPECS) == FIELDS, "SPECS must list every field of fields.FIELDS, in that order"


def _parse_one(name: str, value: str, state: FormState, notices: list[str]) -> FormState:
    changes: dict[str, Any] = {name: SPECS[name].parse(value, notices)}
    return replace(state, **changes)


def from_query(params: Mapping[str, str] | list[tuple[str, str]]) -> Parsed:
    """Parse a page URL's query parameters into a :class:`FormState`; never raises.

    Each unknown, repeated or malformed parameter is ignored (the default stays) with a notice a
    person can act on. Parameters Gradio or the Spaces embed add (``__theme``, ``view``) are
    ignored silently, and so are the "What fits my GPU?" tab's (``fits_*``, :data:`~estimator_app.whatfits.PARAMS`).
    """
    items = list(params.items()) if isinstance(params, Mapping) else list(params)
    state = FormState()
    notices: list[str] = []
    seen: set[str] = set()
    given = False
    for raw_name, raw_value in items:
        name = str(raw_name)
        value = str(raw_value)
        if _FOREIGN.match(name) or name in whatfits.PARAMS:  # the "What fits my GPU?" tab's own parameters
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
    if not given:  # no link: the page's own defaults (a link without dtypes keeps the contract's, so it means what it meant)
        state = replace(state, dtypes=PAGE_DTYPES)
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


def check(state: FormState) -> None:
    """Refuse, in the page's words, a combination of fields the page cannot ask the core (``ValueError``).

    The one tensor-parallel control means "split over N GPUs" to run (the core's strategy tp) or serve
    (vLLM's size); loading or fine-tuning has none.
    """
    if state.mode in ("load", "training") and state.tensor_parallel_size > 1:
        raise ValueError(f"{short_label('tensor_parallel_size')} applies to running (inference) and serving; to fine-tune on several GPUs "
                         f"choose a {short_label('strategy')} (ddp, zero1-3, fsdp) and {short_label('gpus')} under Advanced, "
                         f"or set {short_label('tensor_parallel_size')} back to 1.")


def to_fields(state: FormState) -> tuple[Any, ...]:
    """The widgets' values for ``state``, in :data:`~estimator_app.fields.FIELDS` order (0 means auto/none)."""
    return tuple(SPECS[name].widget(getattr(state, name)) for name in FIELDS)
