"""The values of the few small integer tensors a multimodal model asks questions about.

Fake tensors carry shapes, not data. A vision-language model asks its inputs questions whose answers
are data: where the image tokens are (``input_ids == image_token_id``, then ``masked_scatter`` of
the image features into those places, ``inputs_embeds[mask]``), how many there are (a
``torch._check`` that the count matches the features), Qwen-VL's ``image_grid_thw.tolist()`` and
``repeat_interleave`` over it, Mllama's ``aspect_ratio_ids``. A fake run cannot answer them
(``DataDependentOutputException``).

:class:`KnownValues` is a dispatch mode entered above the tracker for the whole step. It keeps the
real values of small integer and boolean tensors beside their fakes (:func:`know`: the inputs the
processor made) and computes every op whose tensor arguments are all known on the real values too,
so that the mask, the count and the grid stay known. A data-dependent op is then answered from the
real values: its output is allocated with the real result's shape by the modes below (the tracker
counts it), and an index by a boolean mask is run as the index by its positions (``nonzero``),
which is what the CPU kernel does. Floating tensors are never known: the model's activations stay
fakes. The real values are a few kilobytes (ids, masks, grids) and are computed with every mode
disabled, so they are never counted.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._subclasses.fake_tensor import DataDependentOutputException, DynamicOutputShapeException
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from torch.utils._pytree import SUPPORTED_NODES, is_namedtuple_instance, tree_flatten, tree_map, tree_unflatten
from torch.utils.weak import WeakIdKeyDictionary

__all__ = ["KnownValues", "know", "known_fakes"]

_MAX_KNOWN = 1 << 22  # elements: ids, masks and grids of a batch, never activations
_MAX_FACTORY_FLOATS = 1 << 12  # elements of a float factory's output followed (positions, not buffers)
_MAX_KNOWN_FLOATS = 1 << 25  # elements of pixels known (Idefics3 asks which images are all zeros: padding)
_aten = torch.ops.aten

KNOWN: WeakIdKeyDictionary = WeakIdKeyDictionary()


def know(fake: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """Remember a copy of ``real`` (a CPU tensor of ``fake``'s shape and dtype) as the value of ``fake``; returns ``fake``."""
    if _is_fake(real) or tuple(fake.shape) != tuple(real.shape):
        raise ValueError(f"known value {tuple(real.shape)} does not match {tuple(fake.shape)}")
    with _disable_current_modes():
        KNOWN[fake] = real.to(fake.dtype, copy=True)
    return fake


def known_fakes(real: dict[str, torch.Tensor], float_dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
    """Fakes of ``real``'s tensors, made inside the fake mode: floating-point ones empty (in ``float_dtype``, default
    their own), the others (ids, masks, sizes) with their values known, so the model's questions about them are answered."""
    return {name: torch.empty(value.shape, dtype=float_dtype or value.dtype) if value.dtype.is_floating_point
            else know(torch.empty(value.shape, dtype=value.dtype), value) for name, value in real.items()}


def _is_fake(t: Any) -> bool:
    return isinstance(t, torch._subclasses.fake_tensor.FakeTensor)


def known_value(t: Any) -> torch.Tensor | None:
    """The real value of a tensor argument: a plain tensor is its own, a fake one only if known."""
    if not isinstance(t, torch.Tensor):
        return None
    if not _is_fake(t):
        return t if t.device.type == "cpu" else None  # a meta tensor has no values either
    return KNOWN.get(t)


def _scalar(t: torch.Tensor) -> Any:
    value = known_value(t)
    if value is None:
        raise DataDependentOutputException(_aten._local_scalar_dense.default)
    with _disable_current_modes():
        return value.tolist()


def _small(t: torch.Tensor, floats: bool = False) -> bool:
    if t.dtype.is_floating_point or t.dtype.is_complex:
        return floats and t.numel() <= _MAX_KNOWN_FLOATS
    return t.numel() <= _MAX_KNOWN


class KnownValues(TorchDispatchMode):
    """See the module docstring. Enter it above the tracker (and below nothing that allocates).

    While entered, ``torch.tensor(data)`` reads known fakes in ``data`` as their values (Qwen-VL builds
    its rope deltas from a list of 0-d tensors; the constructor reads their memory, not through an op)
    and its result is known too."""

    def __enter__(self) -> KnownValues:
        self._tensor = torch.tensor
        made = self._tensor

        def tensor(data: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
            if not any(isinstance(x, torch.Tensor) and _is_fake(x) for x in tree_flatten(data)[0]):
                return made(data, *args, **kwargs)
            values = tree_map(lambda x: _scalar(x) if isinstance(x, torch.Tensor) else x, data)
            out = made(values, *args, **kwargs)
            with _disable_current_modes():
                real = made(values, *args, **{**kwargs, "device": "cpu"})
            if _is_fake(out) and _small(real):
                KNOWN[out] = real
            return out

        torch.tensor = tensor
        self._isfinite = torch.isfinite
        checks = self._isfinite

        def isfinite(x: torch.Tensor) -> torch.Tensor:
            # DETR's encoder layers ask in training whether their activations are all finite (and clamp them if
            # not): they are, in a run from finite weights and inputs that has not diverged
            out = checks(x)
            if _is_fake(out) and known_value(x) is None:
                with _disable_current_modes():
                    KNOWN[out] = torch.ones((), dtype=torch.bool).expand(out.shape)
            return out

        torch.isfinite = isfinite  # type: ignore[assignment]
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        torch.tensor = self._tensor
        torch.isfinite = self._isfinite
        super().__exit__(*exc)

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        tensors = _tensor_args(args, kwargs)
        known = all(known_value(t) is not None for t in tensors)
        flat, spec = tree_flatten((args, kwargs)) if known else ([], None)  # only the real values' ops read them
        if func is _aten._local_scalar_dense.default and known:
            return _real(func, flat, spec)
        if known and func in _DATA_SHAPED:
            return self._from_real(func, flat, spec)
        if func is _aten.rand.default and not list(args[0]):
            # a 0-d draw is transformers' layerdrop (``torch.rand([]) < self.layerdrop``, its only use there):
            # known as the largest draw, so every layer runs, as in the steps of a run that hold the most
            out = func(*args, **kwargs)
            with _disable_current_modes():
                KNOWN[out] = torch.tensor(1.0 - 2.0**-24, dtype=out.dtype)
            return out
        try:
            out = func(*args, **kwargs)
        except (DataDependentOutputException, DynamicOutputShapeException):
            if known:
                return self._from_real(func, flat, spec)
            return self._by_positions(func, args, kwargs)
        if func._schema.is_mutable:  # in place (Adam's step += 1): the real values follow, or are forgotten
            if known:
                _real(func, flat, spec)
            else:
                for t in _written(func, args, kwargs):
                    KNOWN.pop(t, None)
            return out
        # floats are followed from known floats (the pixels a model asks about), and where a few thousand
        # are computed from known integers (Qwen2-VL's vision positions go through a float product); never
        # from a factory (an optimizer's step count starts as one and must stay a fake)
        floats = known and (any(_is_fake(t) and t.dtype.is_floating_point for t in tensors) or (
            any(_is_fake(t) for t in tensors) and _tiny(out)) or (
            func is _aten._to_copy.default and _is_fake(args[0])))  # known integers cast (Gemma 4's pooling weights)
        if known and _all_small(out, floats):
            _pair(out, _real(func, flat, spec), floats)
        elif func in _FILLED and _tiny(out) and _is_fake(out):
            # a few thousand elements filled with one value: its value is the fill, whatever its input's data (UDOP's
            # patch mask, full_like(image features, True), then marked by the known boxes)
            with _disable_current_modes():
                KNOWN[out] = func(torch.empty(out.shape, dtype=out.dtype), *args[1:], **kwargs)
        return out

    def _from_real(self, func: Any, flat: list[Any], spec: Any) -> Any:
        """The op computed on the real values; its outputs allocated as fakes of the real shapes below this mode."""
        real = _real(func, flat, spec)

        def fake_of(r: Any) -> Any:
            if not isinstance(r, torch.Tensor):
                return r
            fake = torch.empty_strided(r.shape, r.stride(), dtype=r.dtype)
            if _small(r):
                KNOWN[fake] = r
            return fake

        return tree_map(fake_of, real)

    def _by_positions(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """An index, index_put or masked_select of an unknown tensor by a known boolean mask: by the mask's positions."""
        if func in (_aten.index.Tensor, _aten.index_put.default, _aten.index_put_.default, _aten._index_put_impl_.default):
            indices = [self._positions(i) for i in args[1]]
            expanded: list[Any] = []
            for i in indices:
                expanded.extend(i if isinstance(i, tuple) else (i,))
            return func(args[0], expanded, *args[2:], **kwargs)
        if func is _aten.masked_select.default:
            x, mask = args[0], args[1]
            real = known_value(mask)
            if real is not None:
                with _disable_current_modes():  # the count is computed on the real mask, outside the fake mode
                    n = int(torch.broadcast_to(real, torch.broadcast_shapes(x.shape, mask.shape)).sum())
                return torch.empty(n, dtype=x.dtype)
        raise DataDependentOutputException(func)

    def _positions(self, index: Any) -> Any:
        if index is None or index.dtype not in (torch.bool, torch.uint8):
            return index
        real = known_value(index)
        if real is None:
            raise DataDependentOutputException(_aten.nonzero.default)
        with _disable_current_modes():
            where = real.nonzero(as_tuple=True)
        out = []
        for w in where:
            fake = torch.empty(w.shape, dtype=w.dtype)
            KNOWN[fake] = w
            out.append(fake)
        return tuple(out)


# Ops whose output is one value in the shape of their input (the input's data unread)
_FILLED = frozenset({_aten.full_like.default, _aten.ones_like.default, _aten.zeros_like.default})

# Ops whose output shape is the data's: computed on the real values when their inputs are known.
_DATA_SHAPED = frozenset({
    _aten.nonzero.default, _aten.masked_select.default, _aten.repeat_interleave.Tensor,
    _aten.repeat_interleave.self_Tensor, _aten.unique_consecutive.default, _aten._unique2.default,
    _aten.unique_dim.default,
})


def _tensor_args(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[torch.Tensor]:
    """The tensors among an op's arguments: ``tree_flatten``'s tensor leaves, without building its spec (an op's
    arguments are tensors, lists and tuples of them, and plain values); any other pytree container: ``tree_flatten``."""
    found: list[torch.Tensor] = []
    if _walk(args, found) and _walk(kwargs.values(), found):
        return found
    return [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]


def _walk(values: Any, found: list[torch.Tensor]) -> bool:
    """Append the tensors in ``values`` (lists, tuples and dicts within) to ``found``; False at another container."""
    for x in values:
        if isinstance(x, torch.Tensor):
            found.append(x)
        elif type(x) is list or type(x) is tuple:
            if not _walk(x, found):
                return False
        elif type(x) is dict:
            if not _walk(x.values(), found):
                return False
        elif type(x) is not torch.Size and (type(x) in SUPPORTED_NODES or is_namedtuple_instance(x)):
            return False
    return True


def _reals(flat: list[Any]) -> list[Any]:
    return [known_value(t) if isinstance(t, torch.Tensor) else t for t in flat]


def _real(func: Any, flat: list[Any], spec: Any) -> Any:
    args, kwargs = tree_unflatten(_reals(flat), spec)
    if "device" in kwargs:
        kwargs = {**kwargs, "device": torch.device("cpu")}
    with _disable_current_modes():
        return func(*args, **kwargs)


def _written(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[torch.Tensor]:
    """The tensors an in-place op writes (its schema's mutable arguments)."""
    written: list[torch.Tensor] = []
    for i, a in enumerate(func._schema.arguments):
        if a.alias_info is not None and a.alias_info.is_write:
            value = args[i] if i < len(args) else kwargs.get(a.name)
            written += [t for t in tree_flatten(value)[0] if isinstance(t, torch.Tensor)]
    return written


def _tiny(out: Any) -> bool:
    outs = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor)]
    return bool(outs) and all(o.numel() <= _MAX_FACTORY_FLOATS for o in outs)


def _all_small(out: Any, floats: bool = False) -> bool:
    """Every tensor output is a small integer or boolean fake, or (``floats``) a float one of known pixels."""
    outs = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor)]
    return bool(outs) and all(_is_fake(o) and _small(o, floats) for o in outs)


def _pair(out: Any, real: Any, floats: bool = False) -> None:
    """Remember the real outputs of an op beside its fake ones (small integer and boolean ones only)."""
    outs, reals = tree_flatten(out)[0], tree_flatten(real)[0]
    for o, r in zip(outs, reals, strict=False):
        if isinstance(o, torch.Tensor) and isinstance(r, torch.Tensor) and _is_fake(o) and _small(r, floats) \
                and tuple(o.shape) == tuple(r.shape):
            KNOWN[o] = r
