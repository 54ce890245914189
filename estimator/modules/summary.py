"""``summarize``: a per-layer memory summary of any ``nn.Module``, from one forward on fake tensors.

Each module call is one line: its path, type, output shape(s), parameter count and bytes, and the
bytes its ops saved for backward. "Saved for backward" is what autograd really keeps: every
tensor that an op packs for its backward formula (``torch.autograd.graph.saved_tensors_hooks``),
counted once per storage, at the innermost module that was running when the first op saved it.
So functional ops inside ``forward()`` (``F.relu``, ``F.max_pool2d``, ``x * y``) are charged to
the module that called them; parameters and the model's inputs are not counted there (they are
the "parameters" and "input" totals); a layer that saves nothing (a ``ReLU`` whose output the next
layer also needs, counted where it was first saved) shows 0.

``depth`` folds nested modules as torchinfo does: a module deeper than ``depth`` disappears and
its parameters and saved bytes are added to its nearest shown ancestor (depth 0 is the root).

The totals: input bytes, parameter bytes, saved-for-backward bytes, their sum ("estimated total",
what a per-layer count can see) and the true training peak from
:func:`~estimator.modules.estimate.estimate_module`, which also holds gradients, optimizer states and the
temporaries of backward. Nothing is run for real; the module is not modified.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.utils._pytree import tree_leaves

from estimator.errors import BadOptionError, InputError
from estimator.modules.estimate import InputSize, estimate_module, meta_copy, parse_input_sizes
from estimator.options import DType
from estimator.peak.inputs.generic import make_input
from estimator.result import Estimate
from estimator.units import format_bytes

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["LayerCall", "Summary", "summarize"]

CONTAINERS = (nn.Sequential, nn.ModuleList, nn.ModuleDict)
_FLOAT = {DType.FLOAT32: torch.float32, DType.FLOAT16: torch.float16, DType.BFLOAT16: torch.bfloat16}


@dataclass
class LayerCall:
    """One call of one module during the forward (mutable while the forward runs)."""

    path: str
    type: str
    depth: int
    parent: int | None  # index of the calling module's LayerCall
    is_container: bool
    params: int = 0
    trainable_params: int = 0
    param_bytes: int = 0
    output_shapes: tuple[tuple[int, ...], ...] = ()
    saved_bytes: int = 0
    finished: int = -1  # order in which calls returned (torchsummary lists layers in this order)


@dataclass(frozen=True, repr=False)
class Summary:
    """The per-layer table (``layers``) and the totals; ``str()`` is a text table."""

    calls: tuple[LayerCall, ...]
    layers: pd.DataFrame
    depth: int
    input_bytes: int
    param_bytes: int
    buffer_bytes: int
    total_params: int
    trainable_params: int
    saved_bytes: int
    output_bytes: int  # every module call's outputs once (torchsummary doubles this)
    dtype: str
    peak: Estimate | None = field(default=None)

    @property
    def estimated_total_bytes(self) -> int:
        """Input + parameters + buffers + saved for backward: what per-layer counting can see."""
        return self.input_bytes + self.param_bytes + self.buffer_bytes + self.saved_bytes

    @property
    def peak_bytes(self) -> int | None:
        """The true training peak (``None`` if it was not asked for or cannot be computed)."""
        return None if self.peak is None else self.peak.rows[0].peak_bytes

    def to_dataframe(self) -> pd.DataFrame:
        return self.layers.copy()

    def __str__(self) -> str:
        return render(self)

    __repr__ = __str__  # a notebook shows the table, not the fields


def _shapes(output: Any) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(t.shape) for t in tree_leaves(output) if isinstance(t, torch.Tensor))


def trace_calls(
    module: nn.Module, sizes: tuple[tuple[int, ...], ...], input_dtype: torch.dtype, dtype: torch.dtype
) -> tuple[list[LayerCall], int, int, int]:
    """One training-mode forward of a fake copy; returns the calls, input, param and buffer bytes."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from estimator.peak.sim.materialize import materialize

    model = meta_copy(module).to(dtype)
    fake_mode = FakeTensorMode(static_shapes=True)
    materialize(model, fake_mode)
    names = {id(m): name for name, m in model.named_modules(remove_duplicate=False)}
    calls: list[LayerCall] = []
    stack: list[int] = []
    counted_params: set[int] = set()
    finished = [0]

    def pre_hook(mod: nn.Module, _args: Any) -> None:
        path = names.get(id(mod), "")
        call = LayerCall(
            path=path, type=type(mod).__name__, depth=0 if not path else path.count(".") + 1,
            parent=stack[-1] if stack else None, is_container=isinstance(mod, CONTAINERS),
        )
        for p in mod.parameters(recurse=False):
            if id(p) not in counted_params:
                counted_params.add(id(p))
                call.params += p.numel()
                call.param_bytes += p.numel() * p.element_size()
                call.trainable_params += p.numel() if p.requires_grad else 0
        calls.append(call)
        stack.append(len(calls) - 1)

    def post_hook(_mod: nn.Module, _args: Any, output: Any) -> None:
        call = calls[stack.pop()]
        call.output_shapes = _shapes(output)
        call.finished = finished[0]
        finished[0] += 1

    weights = {id(t): t for t in [*model.parameters(), *model.buffers()]}
    skip = {t.untyped_storage()._cdata for t in weights.values()}
    seen: set[int] = set()

    def pack(t: torch.Tensor) -> torch.Tensor:
        try:
            storage = t.untyped_storage()
        except (NotImplementedError, RuntimeError):
            return t
        key = storage._cdata
        if key not in skip and key not in seen and stack:
            seen.add(key)
            calls[stack[-1]].saved_bytes += storage.nbytes()
        return t

    handles = []
    for mod in model.modules():
        handles.append(mod.register_forward_pre_hook(pre_hook))
        handles.append(mod.register_forward_hook(post_hook))
    param_bytes = sum(p.numel() * p.element_size() for p in {id(p): p for p in model.parameters()}.values())
    buffer_bytes = sum(b.numel() * b.element_size() for b in {id(b): b for b in model.buffers()}.values())
    try:
        with fake_mode:
            inputs = [make_input(size, input_dtype) for size in sizes]
            skip.update(x.untyped_storage()._cdata for x in inputs)
            input_bytes = sum(x.numel() * x.element_size() for x in inputs)
            model.train()
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                try:
                    output = model(*inputs)
                except Exception as exc:
                    raise InputError(
                        f"the module's forward failed on inputs of size {', '.join(map(str, sizes))}: "
                        f"{type(exc).__name__}: {exc}"
                    ) from exc
            del output, inputs
    finally:
        for h in handles:
            h.remove()
        FakeTensorMode.cache_clear()
        gc.collect()
    return calls, input_bytes, param_bytes, buffer_bytes


def fold(calls: list[LayerCall], depth: int) -> list[LayerCall]:
    """Calls at most ``depth`` deep; deeper ones add their parameters and saved bytes to their ancestor."""
    kept = {i for i, c in enumerate(calls) if c.depth <= depth}
    folded = {i: LayerCall(**vars(c)) for i, c in enumerate(calls) if i in kept}
    for i, call in enumerate(calls):
        if i in kept:
            continue
        j = call.parent
        while j is not None and j not in kept:
            j = calls[j].parent
        if j is None:
            continue
        target = folded[j]
        target.params += call.params
        target.trainable_params += call.trainable_params
        target.param_bytes += call.param_bytes
        target.saved_bytes += call.saved_bytes
    return [folded[i] for i in sorted(folded)]


def summarize(
    module: nn.Module,
    input_size: InputSize,
    *,
    depth: int = 3,
    input_dtype: torch.dtype | None = None,
    dtype: str = "float32",
    device: str = "cuda",
    optimizer: str = "adamw",
    loss_fn: Callable[[Any], torch.Tensor] | None = None,
    peak: bool = True,
) -> Summary:
    """A per-layer summary of ``module`` for inputs of ``input_size`` (batch included).

    ``depth`` folds modules nested deeper than it (torchinfo's convention, root = 0). With
    ``peak`` the true training peak is estimated too (``estimate_module`` with ``device``,
    ``optimizer`` and ``loss_fn``, everything in ``dtype``: a 16-bit ``dtype`` means pure 16-bit
    training), which costs one more simulated run.
    """
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 0:
        raise BadOptionError(f"depth must be an integer >= 0; got {depth!r}.")
    row_dtype = DType.parse(dtype, option="dtypes")
    if row_dtype not in _FLOAT:
        raise BadOptionError(f"summarize works in float32, float16 or bfloat16; got {dtype!r}.")
    sizes = parse_input_sizes(input_size)
    torch_dtype = _FLOAT[row_dtype]
    calls, input_bytes, param_bytes, buffer_bytes = trace_calls(module, sizes, input_dtype or torch_dtype, torch_dtype)
    shown = fold(calls, depth)
    estimate = None
    if peak:
        estimate = estimate_module(
            module, sizes, input_dtype=input_dtype, dtypes=(row_dtype,), device=device, optimizer=optimizer,
            loss_fn=loss_fn, pure_16bit=True,
        )
    itemsize = torch.empty((), dtype=torch_dtype).element_size()
    return Summary(
        calls=tuple(calls),
        layers=_frame(shown),
        depth=depth,
        input_bytes=input_bytes,
        param_bytes=param_bytes,
        buffer_bytes=buffer_bytes,
        total_params=sum(c.params for c in calls),
        trainable_params=sum(c.trainable_params for c in calls),
        saved_bytes=sum(c.saved_bytes for c in calls),
        output_bytes=sum(_numel(s) for c in calls for s in c.output_shapes) * itemsize,
        dtype=row_dtype.value,
        peak=estimate,
    )


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _frame(calls: list[LayerCall]) -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame.from_records(
        [
            {
                "path": c.path,
                "type": c.type,
                "depth": c.depth,
                "output_shape": c.output_shapes[0] if len(c.output_shapes) == 1 else c.output_shapes,
                "params": c.params,
                "param_bytes": c.param_bytes,
                "saved_bytes": c.saved_bytes,
            }
            for c in calls
        ],
        columns=["path", "type", "depth", "output_shape", "params", "param_bytes", "saved_bytes"],
    )


def _shape_text(shape: Any) -> str:
    if isinstance(shape, tuple) and shape and isinstance(shape[0], tuple):
        return ", ".join(_shape_text(s) for s in shape)
    return "[" + ", ".join(str(d) for d in shape) + "]"


def render(summary: Summary) -> str:
    """The summary as a plain text table (binary units, see :mod:`estimator.units`)."""
    rows = [("Layer", "Type", "Output shape", "Params", "Param bytes", "Saved for backward")]
    for rec in summary.layers.itertuples(index=False):
        label = "  " * rec.depth + (rec.path.rsplit(".", 1)[-1] if rec.path else "(root)")
        rows.append((
            label, rec.type, _shape_text(rec.output_shape), f"{rec.params:,}",
            format_bytes(rec.param_bytes) if rec.param_bytes else "—",
            format_bytes(rec.saved_bytes) if rec.saved_bytes else "—",
        ))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    line = "-" * (sum(widths) + 2 * (len(widths) - 1))

    def fmt(r: tuple[str, ...]) -> str:
        cells = [r[0].ljust(widths[0]), r[1].ljust(widths[1])] + [c.rjust(w) for c, w in zip(r[2:], widths[2:], strict=False)]
        return "  ".join(cells).rstrip()

    out = [line, fmt(rows[0]), line, *(fmt(r) for r in rows[1:]), line]
    totals = [
        ("Total params", f"{summary.total_params:,}"),
        ("Trainable params", f"{summary.trainable_params:,}"),
        ("Input", format_bytes(summary.input_bytes)),
        (f"Parameters ({summary.dtype})", format_bytes(summary.param_bytes)),
    ]
    if summary.buffer_bytes:
        totals.append(("Buffers", format_bytes(summary.buffer_bytes)))
    totals += [
        ("Forward/backward (saved for backward)", format_bytes(summary.saved_bytes)),
        ("Estimated total (input + weights + saved)", format_bytes(summary.estimated_total_bytes)),
    ]
    if summary.peak is not None:
        row = summary.peak.rows[0]
        device = summary.peak.options.get("device", "")
        totals.append((f"True training peak ({summary.peak.options.get('optimizer', '')}, {device})", format_bytes(row.peak_bytes)))
    width = max(len(k) for k, _ in totals)
    out += [f"{k.ljust(width)}  {v}" for k, v in totals]
    out.append(line)
    return "\n".join(out)
