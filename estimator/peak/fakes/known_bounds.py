"""Indices whose values are unknown but bounded, and the equalities they answer, as known values of a fake run.

``argmin`` / ``argmax`` of a float tensor along a dimension of size ``n`` returns indices in ``[0, n)``
whatever the floats are. GLM-Image's VQ quantizer picks each patch's nearest codebook entry that way
(``torch.argmin(distances, dim=1)`` over ``num_embeddings`` codes), ``masked_scatter``\\ s those codes into
``input_ids`` at the image tokens, then its rotary index searches that tensor for its image start and end ids
(``torch.where(input_ids == image_end_token_id)``). The codes are data (they follow from the weights), but the
answer is not: its checkpoints put the special ids above the codes (codes 0..16383, start and end 16384, 16385),
so no code equals them, and the search finds exactly the ids the processor wrote.

:class:`KnownBounds` is a dispatch mode entered above :class:`~estimator.peak.fakes.known_values.KnownValues`. It
remembers, for a small integer fake, its known entries' values, which entries are known, and the range
``[low, high)`` that holds every unknown entry (:data:`_BOUNDED`): the output of an ``argmin`` / ``argmax`` of an
unknown float tensor (nothing known, the range ``[0, n)``), then what the ops that only move entries make of it
with known tensors (views, ``select`` / ``slice``, ``cat``, ``masked_scatter``, an index by known indices, an
integer copy: each run on the known values and on the known-entry mask alike). An equality (``eq`` / ``ne``)
with a value outside the range is then known: at the known entries it is their comparison, at the others
false (``ne``: true); it is handed to ``KnownValues`` (:func:`~estimator.peak.fakes.known_values.know`), which answers
the ``nonzero`` after it. A moved tensor whose entries are all known is handed over too. Everything else stays a
fake: the bounds say nothing about which code each patch gets, and no other question is answered.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from torch.utils._pytree import tree_flatten, tree_unflatten
from torch.utils.weak import WeakIdKeyDictionary

from estimator.peak.fakes.known_values import know, known_value

__all__ = ["KnownBounds"]

_aten = torch.ops.aten
_MAX = 1 << 22  # elements: codes of a batch's images, never activations
_INDEXERS = frozenset({_aten.argmin.default, _aten.argmax.default})
# ops that move entries: the positions of their data arguments (the rest: indices, masks, sizes)
_MOVES: dict[Any, tuple[int, ...]] = {
    **dict.fromkeys((_aten.view.default, _aten._unsafe_view.default, _aten.reshape.default, _aten.clone.default,
                     _aten._to_copy.default, _aten.alias.default, _aten.detach.default, _aten.select.int,
                     _aten.slice.Tensor, _aten.unsqueeze.default, _aten.squeeze.dim, _aten.squeeze.default,
                     _aten.squeeze.dims, _aten.expand.default, _aten.permute.default, _aten.transpose.int,
                     _aten.t.default, _aten.index.Tensor), (0,)),
    _aten.masked_scatter.default: (0, 2),
}
_EQUALITIES = frozenset({_aten.eq.Scalar, _aten.ne.Scalar, _aten.eq.Tensor, _aten.ne.Tensor})


class Bounded(NamedTuple):
    """What is known of an integer tensor: ``values`` where ``known``; every other entry in ``[low, high)``."""

    values: torch.Tensor
    known: torch.Tensor
    low: int
    high: int


_BOUNDED: WeakIdKeyDictionary = WeakIdKeyDictionary()


def _is_fake(t: Any) -> bool:
    return isinstance(t, torch._subclasses.fake_tensor.FakeTensor)


def _integer(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and not t.dtype.is_floating_point and not t.dtype.is_complex \
        and t.dtype is not torch.bool and t.numel() <= _MAX


def bounds(t: torch.Tensor) -> Bounded | None:
    """What :class:`KnownBounds` knows of ``t`` (None: nothing)."""
    return _BOUNDED.get(t) if _is_fake(t) else None


class KnownBounds(TorchDispatchMode):
    """See the module docstring. Enter it above :class:`~estimator.peak.fakes.known_values.KnownValues`."""

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func in _INDEXERS:
            _indices(func, args, kwargs, out)
        elif not _BOUNDED:
            return out
        elif func is _aten.cat.default:
            _moved(func, args, kwargs, out, data=tuple(range(len(args[0]))), listed=True)
        elif func in _MOVES:
            _moved(func, args, kwargs, out, data=_MOVES[func])
        elif func in _EQUALITIES:
            _equality(func, args, out)
        return out


def _indices(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
    """``argmin`` / ``argmax`` of an unknown float tensor: every index in ``[0, n)``."""

    x = args[0]
    if not (_is_fake(x) and x.is_floating_point() and known_value(x) is None and _is_fake(out) and _integer(out)):
        return
    dim = args[1] if len(args) > 1 else kwargs.get("dim")
    n = x.numel() if dim is None else x.shape[dim]
    with _disable_current_modes():
        _BOUNDED[out] = Bounded(torch.zeros(out.shape, dtype=out.dtype), torch.zeros(out.shape, dtype=torch.bool), 0, int(n))


def _moved(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any, *, data: tuple[int, ...],
           listed: bool = False) -> None:
    """An op that moves entries of bounded (or known) data: its output's values, known mask and range."""

    if not (_is_fake(out) and _integer(out)):
        return
    items = list(args[0]) if listed else list(args)
    values, masks, ranges = list(items), list(items), []
    for i, item in enumerate(items):
        if i not in data:  # an index, a mask, a size: its real value in both runs
            flat, spec = tree_flatten(item)
            reals = [known_value(t) if isinstance(t, torch.Tensor) else t for t in flat]
            if any(r is None and isinstance(t, torch.Tensor) for r, t in zip(reals, flat, strict=True)):
                return
            values[i] = masks[i] = tree_unflatten(reals, spec)
            continue
        real = known_value(item)  # a known value first (routing's tied argmax is known whole)
        found = bounds(item) if real is None else None
        if found is not None:
            values[i], masks[i] = found.values, found.known
            ranges.append((found.low, found.high))
            continue
        if real is None:
            return  # an unknown argument: the output is not bounded
        values[i] = real
        with _disable_current_modes():
            masks[i] = torch.ones(real.shape, dtype=torch.bool)
    if not ranges:
        return  # nothing bounded among the data: KnownValues' business
    rest = list(args[1:]) if listed else []
    cpu = {**kwargs, "device": torch.device("cpu")} if "device" in kwargs else kwargs
    with _disable_current_modes():
        new_values = func(values, *rest, **cpu) if listed else func(*values, **cpu)
        plain = {k: v for k, v in cpu.items() if k != "dtype"}  # the mask stays boolean through an integer copy
        new_known = (func(masks, *rest, **plain) if listed else func(*masks, **plain)).to(torch.bool)
        if tuple(new_values.shape) != tuple(out.shape) or tuple(new_known.shape) != tuple(out.shape):
            return
        if bool(new_known.all()):
            know(out, new_values)
            return
        _BOUNDED[out] = Bounded(new_values, new_known, min(lo for lo, _ in ranges), max(hi for _, hi in ranges))


def _equality(func: Any, args: tuple[Any, ...], out: Any) -> None:
    """``x == v`` / ``x != v`` of a bounded ``x`` and a known ``v`` outside its range: known."""

    x, other = args[0], args[1]
    found = bounds(x) if known_value(x) is None else None
    if found is None or not _is_fake(out) or known_value(out) is not None:
        return
    if isinstance(other, torch.Tensor):
        real = known_value(other)
        if real is None or real.numel() != 1:
            return
        other = real.item()
    if not isinstance(other, int) or isinstance(other, bool) or found.low <= other < found.high:
        return
    equal = func in (_aten.eq.Scalar, _aten.eq.Tensor)
    with _disable_current_modes():
        known = torch.where(found.known, found.values == other if equal else found.values != other,
                            torch.tensor(not equal))
        know(out, known.expand(out.shape) if tuple(known.shape) != tuple(out.shape) else known)
