"""``estimate_module``: the contract's :class:`~estimator.result.Estimate` for any ``nn.Module``.

A thin front over the project's one simulation engine,
:func:`~estimator.peak.engine.simulate_step` (the same function ``simulate_peak`` runs for Hub
models). The module is never run for real and never copied with its data: its parameters and
buffers are mapped to meta tensors (a structural ``deepcopy`` whose memo maps every tensor to a
meta one, so the caller's module is untouched and tied weights stay tied), the copy is
materialised as fake tensors by :func:`~estimator.peak.sim.materialize.materialize`, and the engine
runs one step on a workload of positional inputs of the given sizes
(:func:`~estimator.peak.inputs.providers.module_workload`):

- ``mode="training"``: two steps of forward, ``loss_fn(output)`` (default: the sum of the first
  output), backward, ``optimizer.step()`` and ``zero_grad(set_to_none=True)``; the peak is taken
  over the second step, when the optimizer states exist. Step 1 runs in full (a module may create
  state in its first forward). The output is dropped once the loss is computed, as a training
  loop that keeps only the loss does. ``Row.outputs_kept_bytes`` (and a note) is the peak of the
  loop that keeps it alive through backward() and the optimizer step
  (``out = model(x); out.sum().backward(); opt.step()``), from the same trace.
- ``mode="inference"``: one forward under ``torch.no_grad()`` in ``eval()`` mode; the output is
  alive at the end.
- ``mode="load"``: weights only; ``peak_bytes`` is ``None`` as the contract says.

So a module too large for this machine costs nothing to estimate: build it under
``torch.device("meta")`` and pass it as is.

``device="cpu"`` adds the buffers the CPU kernels allocate internally (oneDNN's blocked copies of
convolution operands, BLAS copies of strided matrix operands), from the engine's one model,
:mod:`estimator.peak.kernels.cpu.workspace`. ``device="cuda"`` runs the same fakes with CUDA's optimizer
defaults (``foreach``) and the engine's model of CUDA's attention kernels
(:mod:`estimator.peak.kernels.cuda.sdpa`); cuDNN workspaces and the CUDA caching allocator's rounding
are not modelled (a note says so).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import gc
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

from estimator.build.weights import measure, training_adam_bytes
from estimator.errors import BadOptionError, InputError, UnsupportedError
from estimator.options import Device, DType, Mode, Optimizer, parse_dtypes
from estimator.peak.engine import outputs_kept_note, simulate_step
from estimator.peak.inputs.generic import module_workload
from estimator.peak.sim.materialize import materialize
from estimator.peak.sim.steps import OPTIMIZERS, StepPeak
from estimator.result import Estimate, Row

__all__ = ["estimate_module", "first_tensor", "parse_input_sizes"]

logger = logging.getLogger(__name__)

_TORCH_DTYPES = {DType.FLOAT32: torch.float32, DType.FLOAT16: torch.float16, DType.BFLOAT16: torch.bfloat16}

InputSize = Sequence[int] | Sequence[Sequence[int]]


def parse_input_sizes(input_size: Any) -> tuple[tuple[int, ...], ...]:
    """``(16, 1, 256, 256)`` -> one input; ``[(2, 3), (2, 5)]`` -> two inputs. Batch included."""
    if isinstance(input_size, (torch.Size, tuple, list)) and input_size and all(
        isinstance(d, int) and not isinstance(d, bool) for d in input_size
    ):
        sizes: list[Any] = [tuple(input_size)]
    elif isinstance(input_size, (tuple, list)) and input_size:
        sizes = [tuple(s) if isinstance(s, (tuple, list, torch.Size)) else s for s in input_size]
    else:
        raise BadOptionError(f"input_size must be a tuple of ints or a list of such tuples; got {input_size!r}.")
    for size in sizes:
        if not isinstance(size, tuple) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in size):
            raise BadOptionError(f"every input size must be a tuple of non-negative ints; got {size!r}.")
    return tuple(sizes)


def first_tensor(output: Any) -> torch.Tensor:
    """The first tensor of a module's output (a tensor, a tuple/list, a dict or a ``ModelOutput``)."""
    if isinstance(output, torch.Tensor):
        return output
    items: Any
    if isinstance(output, Mapping):
        items = output.values()
    elif isinstance(output, (tuple, list)):
        items = output
    else:
        items = ()
    for item in items:
        with contextlib.suppress(InputError):
            return first_tensor(item)
    raise InputError(f"the module's output holds no tensor ({type(output).__name__}); pass loss_fn.")


def meta_copy(module: nn.Module) -> nn.Module:
    """A structural copy of ``module`` whose tensors are meta tensors; the original is untouched.

    Parameters, buffers and plain tensor attributes map to meta tensors of the same shape, dtype
    and stride through ``deepcopy``'s memo, so no data is copied and tied tensors stay tied.
    """
    memo: dict[int, Any] = {}
    for sub in module.modules():
        tensors = [*sub._parameters.values(), *sub._buffers.values()]
        tensors += [v for v in vars(sub).values() if isinstance(v, torch.Tensor)]
        for t in tensors:
            if t is None or id(t) in memo:
                continue
            meta = torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device="meta")
            if isinstance(t, nn.Parameter):
                meta = nn.Parameter(meta, requires_grad=t.requires_grad)
            memo[id(t)] = meta
    return copy.deepcopy(module, memo)


def simulate_module(
    model: nn.Module,
    sizes: tuple[tuple[int, ...], ...],
    input_dtype: torch.dtype,
    *,
    mode: Mode,
    device: Device,
    optimizer: Optimizer,
    loss_fn: Callable[[Any], torch.Tensor] | None,
    autocast_dtype: torch.dtype | None = None,
) -> StepPeak:
    """One step of ``model`` (built on meta, consumed) on inputs of ``sizes``, by the one engine
    (:func:`~estimator.peak.engine.simulate_step`): the peak of each phase, and the peak had the
    outputs stayed alive (:attr:`~estimator.peak.sim.steps.StepPeak.outputs_kept`, training)."""
    if optimizer.value not in OPTIMIZERS:
        raise UnsupportedError(f"optimizer {optimizer.value} is not simulated for modules; use one of {', '.join(OPTIMIZERS)}.")
    fake_mode = FakeTensorMode(static_shapes=True)
    try:
        materialize(model, fake_mode)
        if mode is Mode.TRAINING and not any(p.requires_grad for p in model.parameters()):
            raise InputError("the module has no trainable parameters; use mode='inference'.")
        workload = module_workload(sizes, input_dtype, functools.partial(_scalar_loss, loss_fn))
        # A module may create state in its first forward (lazy modules, caches): step 1 runs in full.
        step = simulate_step(
            model, workload, fake_mode, mode=mode.value, device=device.value,  # type: ignore[arg-type]  # the enums' values are the engine's literals (load mode never gets here)
            optimizer=optimizer.value, autocast_dtype=autocast_dtype, full_first_step=True,
        )
    finally:
        FakeTensorMode.cache_clear()  # the dispatch cache is process-wide
        gc.collect()
    return step


def _scalar_loss(loss_fn: Callable[[Any], torch.Tensor] | None, output: Any) -> torch.Tensor:
    loss = loss_fn(output) if loss_fn is not None else first_tensor(output).sum()
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        raise InputError("loss_fn must return a scalar tensor.")
    return loss


def estimate_module(
    module: nn.Module,
    input_size: InputSize,
    *,
    input_dtype: torch.dtype | None = None,
    mode: str = "training",
    dtypes: Any = ("float32",),
    device: str = "cuda",
    optimizer: str = "adamw",
    loss_fn: Callable[[Any], torch.Tensor] | None = None,
    pure_16bit: bool = False,
    name: str | None = None,
) -> Estimate:
    """Estimate the memory of ``module`` for inputs of ``input_size`` (batch included).

    One row per dtype of ``dtypes`` (float32, float16, bfloat16; quantized rows carry ``None``
    and a note). 16-bit rows train in mixed precision (fp32 weights and optimizer states, CPU
    autocast to the row's dtype) unless ``pure_16bit``. ``input_dtype`` (e.g. ``torch.long``
    for token ids) defaults to the row's float dtype. ``loss_fn(output)`` must return a scalar
    tensor; without it a training step backpropagates the sum of the first output. ``module``
    may live on any device, including ``meta``; it is not modified.
    """
    parsed_mode = Mode.parse(mode, option="mode")
    parsed_device = Device.parse(device, option="device")
    parsed_optimizer = Optimizer.parse(optimizer, option="optimizer")
    assert isinstance(parsed_mode, Mode) and isinstance(parsed_device, Device)
    assert isinstance(parsed_optimizer, Optimizer)
    row_dtypes = parse_dtypes(dtypes)
    sizes = parse_input_sizes(input_size)
    if not isinstance(module, nn.Module):
        raise BadOptionError(f"module must be a torch.nn.Module; got {type(module).__name__}.")
    rows = tuple(
        _row(module, sizes, dtype, input_dtype, parsed_mode, parsed_device, parsed_optimizer, loss_fn, pure_16bit)
        for dtype in row_dtypes
    )
    options: dict[str, Any] = {
        "dtypes": [d.value for d in row_dtypes],
        "mode": parsed_mode.value,
        "input_size": [list(s) for s in sizes],
    }
    if parsed_mode is not Mode.LOAD:
        options.update(device=parsed_device.value, input_dtype=None if input_dtype is None else str(input_dtype))
    if parsed_mode is Mode.TRAINING:
        options.update(optimizer=parsed_optimizer.value, pure_16bit=pure_16bit, loss_fn=loss_fn is not None)
    return Estimate(
        model=name or type(module).__name__,
        library="torch",
        source="module",
        mode=parsed_mode,
        rows=rows,
        options=options,
        architecture=type(module).__name__,
    )


def _row(
    module: nn.Module,
    sizes: tuple[tuple[int, ...], ...],
    dtype: DType,
    input_dtype: torch.dtype | None,
    mode: Mode,
    device: Device,
    optimizer: Optimizer,
    loss_fn: Callable[[Any], torch.Tensor] | None,
    pure_16bit: bool,
) -> Row:
    if dtype not in _TORCH_DTYPES:
        return Row(
            dtype=dtype.value, total_bytes=None, largest_layer_bytes=None, training_adam_bytes=None, method="exact",
            notes=(f"{dtype.value} rows need a quantization scheme; estimate_module handles float32, float16 and bfloat16.",),
        )
    torch_dtype = _TORCH_DTYPES[dtype]
    mixed = dtype.is_16bit and not pure_16bit and mode is Mode.TRAINING
    weights_dtype = torch.float32 if mixed else torch_dtype
    loaded = meta_copy(module).to(torch_dtype)
    weights = measure(loaded)
    adam = training_adam_bytes(weights, mixed_precision=dtype.is_16bit and not pure_16bit)
    notes: list[str] = []
    if mode is Mode.LOAD:
        return Row(dtype.value, weights.total_bytes, weights.largest_layer_bytes, adam, "exact", notes=tuple(notes))
    model = meta_copy(module).to(weights_dtype)
    if mixed:
        notes.append(f"mixed precision: fp32 weights and optimizer states, autocast to {dtype.value}")
    try:
        step = simulate_module(
            model, sizes, input_dtype or torch_dtype, mode=mode, device=device, optimizer=optimizer,
            loss_fn=loss_fn, autocast_dtype=torch_dtype if mixed else None,
        )
    except (InputError, UnsupportedError):
        raise
    except Exception as exc:
        data_dependent = type(exc).__name__ in ("DynamicOutputShapeException", "DataDependentOutputException")
        if data_dependent:
            return Row(
                dtype.value, weights.total_bytes, weights.largest_layer_bytes, adam, "simulated",
                notes=(f"the forward depends on tensor values ({type(exc).__name__}); its peak cannot be simulated",),
            )
        raise InputError(
            f"the module's forward failed on inputs of size {', '.join(map(str, sizes))}: {type(exc).__name__}: {exc}"
        ) from exc
    peak, kept = step.peak.peak_bytes, step.outputs_kept
    if mode is Mode.TRAINING:
        notes.append(f"training: 2 steps of forward, loss, backward and {optimizer.value}; peak of step 2")
        if kept is not None:
            notes.append(outputs_kept_note("the output dropped once the loss is computed",
                                           kept.peak_bytes, peak))
    else:
        notes.append("inference: one forward under no_grad")
    if device is Device.CUDA:
        notes.append("cuda: cuDNN workspaces and allocator rounding not counted")
    return Row(
        dtype=dtype.value,
        total_bytes=weights.total_bytes,
        largest_layer_bytes=weights.largest_layer_bytes,
        training_adam_bytes=adam,
        method="simulated",
        peak_bytes=peak,
        components=dict(step.peak.components),
        outputs_kept_bytes=None if kept is None else kept.peak_bytes,
        notes=tuple(notes),
    )
