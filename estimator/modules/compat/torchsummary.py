"""torchsummary's ``summary(model, input_size, batch_size=-1)``, with correct memory figures.

Same call (``input_size`` without the batch dimension, a tuple or a list of tuples; the default
``batch_size=-1`` shows ``-1`` in the shapes and sizes one sample, as torchsummary did; ``dtypes``
one tensor type per input, e.g. ``[torch.FloatTensor, torch.LongTensor]``), the same return value
(``summary`` prints the table and returns ``(total_params, trainable_params)``) and the same
table, with these differences (``docs/modules.md`` works an example):

- the layers are found by a forward on fake tensors, so nothing runs on the device and models
  larger than it can be summarised; the dtype is float32 (torchsummary assumed 4-byte floats);
- "Params size" counts each parameter once (torchsummary counted a reused module at every call);
- "Forward/backward pass size" is what a training step really holds besides the parameters and the
  input at its peak (saved activations, backward's temporaries, gradients, AdamW states), not
  twice every hooked output, and "Estimated Total Size" is that peak;
- below the table, torchsummary's own figures for comparison and where the peak goes.

Sizes are MiB (torchsummary's "MB" were 1024**2 bytes too) and labelled so.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from estimator.errors import BadOptionError
from estimator.modules.summary import CONTAINERS, summarize

__all__ = ["summary", "summary_string"]

MiB = 1024**2


def summary(
    model: nn.Module,
    input_size: Sequence[int] | Sequence[Sequence[int]],
    batch_size: int = -1,
    device: Any = "cuda",
    dtypes: Any = None,
) -> tuple[int, int]:
    """Print the torchsummary-style table and return ``(total_params, trainable_params)``, as torchsummary does."""
    text, counts = summary_string(model, input_size, batch_size=batch_size, device=device, dtypes=dtypes)
    print(text)  # a compatibility shim: printing is the old tool's contract
    return counts


def summary_string(
    model: nn.Module,
    input_size: Sequence[int] | Sequence[Sequence[int]],
    batch_size: int = -1,
    device: Any = "cuda",
    dtypes: Any = None,
) -> tuple[str, tuple[int, int]]:
    """The table as a string and ``(total_params, trainable_params)``, as torchsummary's ``summary_string``."""
    sizes: list[tuple[int, ...]] = (
        [tuple(input_size)] if all(isinstance(d, int) for d in input_size) else [tuple(s) for s in input_size]  # type: ignore[arg-type]  # the int-or-tuples union is narrowed by the all() test, which mypy cannot see
    )
    batch = 1 if batch_size == -1 else batch_size
    input_dtypes = _input_dtypes(dtypes, len(sizes))
    target = str(device).split(":")[0] if str(device).startswith(("cuda", "cpu")) else "cuda"
    run_model, root_depth = model, 0
    if len(set(input_dtypes)) > 1:
        run_model, root_depth = _CastInputs(model, input_dtypes), 1
    s = summarize(
        run_model, [(batch, *size) for size in sizes], depth=1 << 30, input_dtype=input_dtypes[0], device=target,
    )
    shown_batch = -1 if batch_size == -1 else batch_size
    calls = sorted((c for c in s.calls if c.depth > root_depth and c.type not in {k.__name__ for k in CONTAINERS}), key=lambda c: c.finished)
    lines = ["-" * 64, "{:>20}  {:>25} {:>15}".format("Layer (type)", "Output Shape", "Param #"), "=" * 64]
    hooked_outputs = 0
    for i, call in enumerate(calls, 1):
        shapes = [[shown_batch, *shape[1:]] if shape else [] for shape in call.output_shapes]
        hooked_outputs += sum(_numel(shape) for shape in call.output_shapes)
        shown = str(shapes[0]) if len(shapes) == 1 else str(shapes)
        lines.append("{:>20}  {:>25} {:>15}".format(f"{call.type}-{i}", shown, f"{call.params:,}"))
    row = s.peak.rows[0] if s.peak is not None else None
    peak = row.peak_bytes if row is not None and row.peak_bytes is not None else s.estimated_total_bytes
    itemsize = torch.empty((), dtype=torch.float32).element_size()
    old_fb = 2 * hooked_outputs * itemsize
    old_total = s.input_bytes + old_fb + s.param_bytes
    lines += [
        "=" * 64,
        f"Total params: {s.total_params:,}",
        f"Trainable params: {s.trainable_params:,}",
        f"Non-trainable params: {s.total_params - s.trainable_params:,}",
        "-" * 64,
        f"Input size (MiB): {s.input_bytes / MiB:.2f}",
        f"Forward/backward pass size (MiB): {(peak - s.param_bytes - s.input_bytes) / MiB:.2f}",
        f"Params size (MiB): {s.param_bytes / MiB:.2f}",
        f"Estimated Total Size (MiB): {peak / MiB:.2f}",
        "-" * 64,
        (
            f"torchsummary's rule (2 x every layer output): forward/backward {old_fb / MiB:.2f} MiB, "
            f"total {old_total / MiB:.2f} MiB"
        ),
        f"Saved for backward (activations autograd keeps): {s.saved_bytes / MiB:.2f} MiB",
    ]
    if row is not None and s.peak is not None:
        parts = ", ".join(f"{k.replace('_', ' ')} {v / MiB:.2f}" for k, v in row.components.items())
        lines.append(
            f"True training peak ({s.peak.options.get('optimizer')}, {s.peak.options.get('device')}, batch {batch}): "
            f"{peak / MiB:.2f} MiB = {parts}"
        )
    lines.append("-" * 64)
    return "\n".join(lines), (s.total_params, s.trainable_params)


def _input_dtypes(dtypes: Any, count: int) -> tuple[torch.dtype, ...]:
    """torchsummary's ``dtypes`` (tensor types such as ``torch.FloatTensor``, or dtypes), one per input."""
    if dtypes is None:
        return (torch.float32,) * count
    if isinstance(dtypes, (torch.dtype, type)):
        dtypes = [dtypes] * count
    parsed = tuple(getattr(d, "dtype", d) for d in dtypes)
    if len(parsed) != count or not all(isinstance(d, torch.dtype) for d in parsed):
        raise BadOptionError(
            f"dtypes must be one tensor type or dtype per input ({count}); got {dtypes!r}."
        )
    return parsed


class _CastInputs(nn.Module):
    """Runs ``model`` on inputs cast to one dtype each (summarize makes them all in the first one).

    The cast copies are real tensors in the simulated step too, so mixed-dtype inputs are counted
    in the first dtype plus the cast; the table's rows start below this wrapper.
    """

    def __init__(self, model: nn.Module, dtypes: tuple[torch.dtype, ...]) -> None:
        super().__init__()
        self.model = model
        self.dtypes = dtypes

    def forward(self, *inputs: torch.Tensor) -> Any:
        return self.model(*(x if x.dtype == d else x.to(d) for x, d in zip(inputs, self.dtypes, strict=True)))


def _numel(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n
