"""Routers that ask their decisions' values: the routing a simulation assumes, and the models that need it.

Most mixture-of-experts layers in transformers run their experts through ``grouped_mm`` (or a batched
path) whose shapes do not depend on where the tokens go. A few loop over the experts in Python and ask
the router's decisions as values: which experts got tokens (``expert_mask.sum(...).nonzero()``: Switch
Transformers, the OpenAI privacy filter's eager experts), how many each got (``expert_size.tolist()``:
JetMoE). A fake run has no values to answer with, and no input value decides them: the decisions come
from the weights.

:class:`AssumedTies` answers them by a stated assumption: **the router's scores tie** (what a router
whose weights are zero computes), so the index ops ``topk`` / ``max`` / ``argmax`` / ``sort`` of an
unknown float tensor give what the CPU kernel gives on equal values: every token picks the same
experts. The real run of such a model is what is simulated, and it is the most tokens any one
expert can receive, so its per-expert activations are the largest of any routing (a trained router
spreads the tokens; the activations saved for training are the same, since each token still goes
through ``top_k`` experts, but where each expert keeps its own weights — Switch Transformers — the
experts no token reaches get no gradient in the step, while a spread routing gives more of them one;
fused expert weights, JetMoE's and the privacy filter's, get a whole gradient either way). Small constant float factories (``torch.zeros``,
``torch.full``: JetMoE counts its tokens per expert by scattering ones into zeros) are known values
too (:class:`~estimator.peak.fakes.known_constants.KnownConstants`). Everything else stays as
:mod:`estimator.peak.fakes.known_values` keeps it.

:func:`assumed` wraps the workload of a model whose router asks (:func:`routes_by_values`) with that
mode and says so in its description. The same assumption answers Autoformer's top-k autocorrelation
delays (:mod:`estimator.peak.inputs.other.series`): which delays are picked does not change what is allocated.
"""

from __future__ import annotations

import contextlib
import inspect
import re
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import _disable_current_modes

from estimator.peak.fakes.known_constants import KnownConstants
from estimator.peak.fakes.known_values import KnownValues, know, known_value
from estimator.peak.workload import Workload

__all__ = ["ROUTING_NOTE", "AssumedTies", "KnownConstants", "assumed", "routes_by_values", "with_ties"]

ROUTING_NOTE = ("routing assumed: the router's scores tie (as with zero router weights), so every token picks the same "
                "experts: the most tokens one expert can get, its largest activations; a trained router spreads the tokens, "
                "and where each expert has its own weights (Switch Transformers) it then also makes gradients for more experts")

_aten = torch.ops.aten
# index ops whose indices output is answered as on equal values; the position of that output
_INDEXERS = {
    _aten.topk.default: 1, _aten.max.dim: 1, _aten.min.dim: 1, _aten.sort.default: 1, _aten.sort.stable: 1,
    _aten.argmax.default: 0, _aten.argmin.default: 0,
}
class AssumedTies(KnownConstants):
    """See the module docstring: constants known (:class:`~estimator.peak.fakes.known_constants.KnownConstants`), and
    the indices of ``topk`` / ``max`` / ``argmax`` / ``sort`` of an unknown float tensor those of tied values."""

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None) -> Any:

        kwargs = kwargs or {}
        if func not in _INDEXERS:
            return super().__torch_dispatch__(func, types, args, kwargs)
        out = func(*args, **kwargs)
        x = args[0]
        if _is_fake(x) and x.is_floating_point() and known_value(x) is None:
            with _disable_current_modes():
                real = func(torch.zeros(x.shape, dtype=x.dtype), *args[1:], **kwargs)
            position = _INDEXERS[func]
            fake = out[position] if isinstance(out, tuple) else out
            know(fake, real[position] if isinstance(real, tuple) else real)
        return out


def _is_fake(t: Any) -> bool:
    return isinstance(t, torch._subclasses.fake_tensor.FakeTensor)


def with_ties(context: Callable[[], Any] | None, ties: bool = True) -> Callable[[], Any]:
    """``context`` (a workload's, e.g. its known values) with :class:`AssumedTies` (``ties``) or
    :class:`KnownConstants` entered above it."""

    @contextlib.contextmanager
    def entered() -> Iterator[None]:
        with context() if context is not None else contextlib.nullcontext(), AssumedTies() if ties else KnownConstants():
            yield

    return entered


def assumed(model: nn.Module, workload: Workload) -> Workload:
    """``workload`` with the routing assumption where the model's router asks its values; with
    :class:`~estimator.peak.fakes.known_constants.KnownConstants` where a sparse-attention indexer builds its
    pools from the attention mask packed beside its keys (GLM-5-Next's ``index_kpool``); else unchanged."""

    if not routes_by_values(model):
        text = getattr(getattr(model, "config", None), "get_text_config", lambda: None)()
        if isinstance(getattr(text, "index_kpool", None), int):
            return replace(workload, context=with_ties(workload.context or KnownValues, ties=False))
        return workload

    return replace(workload, context=with_ties(workload.context or KnownValues),
                   description=f"{workload.description}; {ROUTING_NOTE}", states_for_all=True)


_ROUTING_CLASS = re.compile(r"Expert|MoE|Moe|Router|Gating|SparseMLP|SparseMoe")
_ASKS = re.compile(r"\.nonzero\(|\.tolist\(\)")
_ASKING: dict[type, bool] = {}


def routes_by_values(model: nn.Module) -> bool:
    """A mixture-of-experts module of the model runs a forward that asks its routing's values (``.nonzero()``,
    ``.tolist()``): an expert class of its own, or one under ``use_experts_implementation`` whose config
    says ``eager`` (``grouped_mm`` and the batched paths do not ask)."""
    for module in model.modules():
        cls = type(module)
        if not _ROUTING_CLASS.search(cls.__name__) or "Attention" in cls.__name__:
            continue  # a vision tower's attention of an MoE model (Qwen3-VL-MoE's) asks its patch grid, not a router
        forward = cls.forward
        original = getattr(forward, "__wrapped__", None)
        if original is not None and hasattr(module, "_is_expert_parallel"):  # transformers' use_experts_implementation
            implementation = getattr(getattr(module, "config", None), "_experts_implementation", "eager")
            if implementation not in (None, "eager"):
                continue
            forward = original
        if cls not in _ASKING:
            try:
                _ASKING[cls] = bool(_ASKS.search(inspect.getsource(forward)))
            except (OSError, TypeError):
                _ASKING[cls] = False
        if _ASKING[cls]:
            return True
    return False
