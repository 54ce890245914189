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
spreads the tokens; its peak is at most this one, with the same saved activations in training, since
each token still goes through ``top_k`` experts). Small constant float factories (``torch.zeros``,
``torch.full``: JetMoE counts its tokens per expert by scattering ones into zeros) are known values
too. Everything else stays as :mod:`estimator.peak.known_values` keeps it.

:func:`assumed` wraps the workload of a model whose router asks (:func:`routes_by_values`) with that
mode and says so in its description. The same assumption answers Autoformer's top-k autocorrelation
delays (:mod:`estimator.peak.series_inputs`): which delays are picked does not change what is allocated.
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
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from torch.utils._pytree import tree_flatten

from estimator.peak.basic_inputs import Workload

__all__ = ["ROUTING_NOTE", "AssumedTies", "assumed", "routes_by_values", "with_ties"]

ROUTING_NOTE = ("routing assumed: the router's scores tie (zero router weights), so every token picks the same "
                "experts, the most tokens one expert can get; a trained router spreads them and peaks at most this")

_aten = torch.ops.aten
# index ops whose indices output is answered as on equal values; the position of that output
_INDEXERS = {
    _aten.topk.default: 1, _aten.max.dim: 1, _aten.min.dim: 1, _aten.sort.default: 1, _aten.sort.stable: 1,
    _aten.argmax.default: 0, _aten.argmin.default: 0,
}
_FACTORIES = frozenset({_aten.zeros.default, _aten.full.default, _aten.ones.default})
_MAX_FACTORY = 1 << 22  # elements of a constant factory made known (a token-by-expert count, never an activation)


class AssumedTies(TorchDispatchMode):
    """See the module docstring. Enter it above :class:`~estimator.peak.known_values.KnownValues`.

    While entered, a known 0-d fake formats as its value, as a real 0-d tensor does (Switch Transformers
    names the expert to run ``f"expert_{expert_idx[0]}"``)."""

    def __enter__(self) -> AssumedTies:
        from estimator.peak.known_values import _value

        fake_class = torch._subclasses.fake_tensor.FakeTensor
        self._format = fake_class.__format__
        formats = self._format

        def format_known(t: torch.Tensor, spec: str) -> str:
            value = _value(t) if t.dim() == 0 else None
            if value is None:
                return formats(t, spec)
            with _disable_current_modes():
                return format(value.item(), spec)

        fake_class.__format__ = format_known  # type: ignore[method-assign]
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        torch._subclasses.fake_tensor.FakeTensor.__format__ = self._format  # type: ignore[method-assign]
        super().__exit__(*exc)

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None) -> Any:
        from estimator.peak.known_values import _value, know

        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func in _INDEXERS:
            x = args[0]
            if _is_fake(x) and x.is_floating_point() and _value(x) is None:
                with _disable_current_modes():
                    real = func(torch.zeros(x.shape, dtype=x.dtype), *args[1:], **kwargs)
                position = _INDEXERS[func]
                fake = out[position] if isinstance(out, tuple) else out
                index = real[position] if isinstance(real, tuple) else real
                know(fake, index)
        elif func in _FACTORIES and _is_fake(out) and out.numel() <= _MAX_FACTORY and not _tensors(args, kwargs):
            with _disable_current_modes():
                real = func(*args, **{**kwargs, "device": torch.device("cpu")})
            know(out, real)
        return out


def _is_fake(t: Any) -> bool:
    return isinstance(t, torch._subclasses.fake_tensor.FakeTensor)


def _tensors(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    return any(isinstance(t, torch.Tensor) for t in tree_flatten((args, kwargs))[0])


def with_ties(context: Callable[[], Any] | None) -> Callable[[], Any]:
    """``context`` (a workload's, e.g. its known values) with :class:`AssumedTies` entered above it."""

    @contextlib.contextmanager
    def entered() -> Iterator[None]:
        with context() if context is not None else contextlib.nullcontext(), AssumedTies():
            yield

    return entered


def assumed(model: nn.Module, workload: Workload) -> Workload:
    """``workload`` with the routing assumption where the model's router asks its values, else unchanged."""
    if not routes_by_values(model):
        return workload
    from estimator.peak.known_values import KnownValues

    return replace(workload, context=with_ties(workload.context or KnownValues),
                   description=f"{workload.description}; {ROUTING_NOTE}")


_ROUTING_CLASS = re.compile(r"Expert|MoE|Moe|Router|Gating|SparseMLP|SparseMoe")
_ASKS = re.compile(r"\.nonzero\(|\.tolist\(\)")
_ASKING: dict[type, bool] = {}


def routes_by_values(model: nn.Module) -> bool:
    """A mixture-of-experts module of the model runs a forward that asks its routing's values (``.nonzero()``,
    ``.tolist()``): an expert class of its own, or one under ``use_experts_implementation`` whose config
    says ``eager`` (``grouped_mm`` and the batched paths do not ask)."""
    for module in model.modules():
        cls = type(module)
        if not _ROUTING_CLASS.search(cls.__name__):
            continue
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
