"""Constants, and the known parts of a concatenation, as known values of a fake run.

:class:`~estimator.peak.fakes.known_values.KnownValues` knows the inputs' integers and what is computed from
them, but never a float tensor made by a factory (an optimizer's step count must stay a fake there). Some
modeling code asks questions whose answers are built from constants and masks only:

- Longformer builds its additive mask with ``torch.where(mask, 0.0, finfo.min)`` (0-d float constants),
  writes ``finfo.max`` for global tokens with ``torch.tensor(...)``, then asks ``mask > 0 ... .any().item()``;
- JetMoE counts the tokens of each expert by scattering ones into ``torch.zeros``;
- GLM-5-Next's sparse-attention indexer packs the attention mask (as floats) beside its keys in one tensor
  (``torch.cat([keys, gate_scores, valid], -1)``), caches it, and splits the mask back out to build its
  pools (``keep = pool_valid.any(0)``, then an index by that mask).

:class:`KnownConstants`, a dispatch mode entered above ``KnownValues``, makes the outputs of small float
factories without tensor arguments (``zeros``, ``ones``, ``full``, ``scalar_tensor``) and of
``torch.tensor(constant)`` known, and remembers which slices of a ``cat`` along a dimension were known
(:data:`_PARTS`): a ``select``, ``slice`` or ``split`` of that tensor that falls inside one known part is
known again, with that part's values. Everything else is left to ``KnownValues``. While entered, a known
0-d fake formats as its value, as a real 0-d tensor does (Switch Transformers names the expert it runs
``f"expert_{expert_idx[0]}"``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from torch.utils._pytree import tree_flatten
from torch.utils.weak import WeakIdKeyDictionary

from estimator.peak.fakes.known_values import know, known_value

__all__ = ["KnownConstants"]

_aten = torch.ops.aten
_FACTORIES = frozenset({_aten.zeros.default, _aten.full.default, _aten.ones.default, _aten.scalar_tensor.default})
_LIFTS = frozenset({_aten.lift_fresh.default, _aten.lift_fresh_copy.default})  # torch.tensor(constant) in a fake mode
_MAX_FACTORY = 1 << 22  # elements of a constant made known (a mask, a token-by-expert count; never an activation)
# fake -> (dim, [(start, stop, real values or None)]): the parts of a concatenation along dim
_PARTS: WeakIdKeyDictionary = WeakIdKeyDictionary()


class KnownConstants(TorchDispatchMode):
    """See the module docstring. Enter it above :class:`~estimator.peak.fakes.known_values.KnownValues`. With
    ``finite``, ``isnan`` / ``isinf`` of an unknown float tensor are known all false: the activations of a run
    that has not diverged (I-BERT asserts it on every activation range it records in training), as
    ``KnownValues`` answers ``torch.isfinite``."""

    def __init__(self, finite: bool = False) -> None:
        super().__init__()
        self.finite = finite

    def __enter__(self) -> KnownConstants:

        fake_class = torch._subclasses.fake_tensor.FakeTensor
        self._format = fake_class.__format__
        formats = self._format

        def format_known(t: torch.Tensor, spec: str) -> str:
            value = known_value(t) if t.dim() == 0 else None
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

        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func in _FACTORIES and _is_fake(out) and out.numel() <= _MAX_FACTORY and not _tensors(args, kwargs):
            with _disable_current_modes():
                real = func(*args, **{**kwargs, "device": torch.device("cpu")})
            know(out, real)
        elif func in _LIFTS and _is_fake(out) and isinstance(args[0], torch.Tensor) and not _is_fake(args[0]) \
                and args[0].device.type == "cpu" and out.numel() <= _MAX_FACTORY:
            know(out, args[0])
        elif self.finite and func in (_aten.isnan.default, _aten.isinf.default) and _is_fake(out) \
                and _is_fake(args[0]) and out.numel() <= _MAX_FACTORY:
            from estimator.peak.fakes.known_values import known_value

            if known_value(args[0]) is None:
                with _disable_current_modes():
                    know(out, torch.zeros(out.shape, dtype=torch.bool))
        elif func is _aten.cat.default:
            _cat_parts(out, list(args[0]), args[1] if len(args) > 1 else kwargs.get("dim", 0))
        elif func in (_aten.select.int, _aten.slice.Tensor, _aten.split_with_sizes.default, _aten.split.Tensor) \
                and isinstance(args[0], torch.Tensor) and args[0] in _PARTS:
            _part_out(func, args, out)
        return out


def _is_fake(t: Any) -> bool:
    return isinstance(t, torch._subclasses.fake_tensor.FakeTensor)


def _tensors(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    return any(isinstance(t, torch.Tensor) for t in tree_flatten((args, kwargs))[0])


def _cat_parts(out: Any, inputs: list[torch.Tensor], dim: int) -> None:
    """Remember the known slices of a concatenation that ``KnownValues`` did not know as a whole."""

    if not _is_fake(out) or known_value(out) is not None or out.numel() > _MAX_FACTORY:
        return
    inputs = [t for t in inputs if not (t.dim() == 1 and t.numel() == 0)]  # the legacy empty tensor cat skips
    dim = dim % out.dim()
    if len(inputs) == 1 and inputs[0] in _PARTS:  # a cache appended to an empty one: the same parts
        _PARTS[out] = _PARTS[inputs[0]]
        return
    across = _across(inputs, dim)
    if across is not None:  # a cache appended to along another dimension than its parts': the parts, each grown
        _PARTS[out] = across
        return
    parts: list[tuple[int, int, torch.Tensor | None]] = []
    start = 0
    for t in inputs:
        stop = start + t.shape[dim]
        parts.append((start, stop, known_value(t)))
        start = stop
    if any(real is not None for _s, _e, real in parts):
        _PARTS[out] = (dim, parts)


def _across(inputs: list[torch.Tensor], dim: int) -> tuple[int, list[tuple[int, int, torch.Tensor | None]]] | None:
    """The parts of a concatenation along ``dim`` of tensors that all have the same parts along another dimension
    (GLM-5-Next's indexer cache grows along the sequence, its mask part is its last channel): each part is the
    concatenation of theirs, known where all of theirs are."""
    if len(inputs) < 2 or not all(t.dim() == inputs[0].dim() for t in inputs):
        return None
    if not all(t in _PARTS for t in inputs):
        return None
    found = [_PARTS[t] for t in inputs]
    axis = found[0][0] % inputs[0].dim()
    bounds = [(a, b) for a, b, _r in found[0][1]]
    if axis == dim or any(f[0] % t.dim() != axis or [(a, b) for a, b, _r in f[1]] != bounds for f, t in zip(found, inputs, strict=True)):
        return None
    parts: list[tuple[int, int, torch.Tensor | None]] = []
    for i, (start, stop) in enumerate(bounds):
        reals = [f[1][i][2] for f in found]
        if any(r is None for r in reals):
            parts.append((start, stop, None))
            continue
        with _disable_current_modes():
            parts.append((start, stop, torch.cat(reals, dim)))
    return (axis, parts) if any(r is not None for _s, _e, r in parts) else None


def _part_out(func: Any, args: tuple[Any, ...], out: Any) -> None:
    """A select, slice or split of a tensor with known parts: the outputs inside one known part are known."""

    x = args[0]
    dim, parts = _PARTS[x]
    splits = func in (_aten.split_with_sizes.default, _aten.split.Tensor)
    axis = (args[2] if len(args) > 2 else 0) if splits else args[1]
    axis %= x.dim()
    if axis != dim:
        return
    size = x.shape[dim]

    def within(lo: int, hi: int) -> tuple[int, torch.Tensor] | None:
        for start, stop, real in parts:
            if real is not None and start <= lo and hi <= stop:
                return start, real
        return None

    if func is _aten.select.int:
        index = args[2] % size
        found = within(index, index + 1)
        if found is not None and known_value(out) is None:
            with _disable_current_modes():
                know(out, found[1].select(dim, index - found[0]))
        return
    if func is _aten.slice.Tensor:
        lo, hi = _bound(args[2] if len(args) > 2 else None, 0, size), _bound(args[3] if len(args) > 3 else None, size, size)
        step = args[4] if len(args) > 4 else 1
        found = within(lo, hi) if step == 1 and lo < hi else None
        if found is not None and known_value(out) is None:
            with _disable_current_modes():
                know(out, found[1].narrow(dim, lo - found[0], hi - lo))
        return
    start = 0
    for piece in out:
        stop = start + piece.shape[dim]
        found = within(start, stop)
        if found is not None and known_value(piece) is None:
            with _disable_current_modes():
                know(piece, found[1].narrow(dim, start - found[0], stop - start))
        start = stop


def _bound(value: int | None, default: int, size: int) -> int:
    """A slice bound as ``aten.slice`` reads it: None is the default, a negative one counts from the end, clamped."""
    if value is None:
        return default
    return max(0, min(size, value + size if value < 0 else value))
