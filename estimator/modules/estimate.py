"""``estimate_module``: the contract's :class:`~estimator.result.Estimate` for any ``nn.Module``.

The module is never run for real and never copied with its data: its parameters and buffers are
mapped to meta tensors (a structural ``deepcopy`` whose memo maps every tensor to a meta one, so
the caller's module is untouched and tied weights stay tied), the copy is materialised as fake
tensors by the peak simulator's :func:`~estimator.peak.materialize.materialize`, and one step is
run under its :class:`~estimator.peak.tracker.StorageTracker`:

- ``mode="training"``: two steps of forward, ``loss_fn(output)`` (default: the sum of the first
  output), backward, ``optimizer.step()`` and ``zero_grad(set_to_none=True)``; the peak is taken
  over the second step, when the optimizer states exist. The output is dropped once the loss is
  computed, as a training loop that keeps only the loss does.
- ``mode="inference"``: one forward under ``torch.no_grad()`` in ``eval()`` mode; the output is
  alive at the end.
- ``mode="load"``: weights only; ``peak_bytes`` is ``None`` as the contract says.

So a module too large for this machine costs nothing to estimate: build it under
``torch.device("meta")`` and pass it as is.

``device="cpu"`` adds the workspaces of the CPU convolution kernels (oneDNN), which allocate
blocked copies of their operands that no aten op shows (see :class:`_CpuKernelWorkspace`).
``device="cuda"`` runs the same fakes with CUDA's optimizer defaults (``foreach``) and the peak
simulator's model of CUDA's attention kernels (:mod:`estimator.peak.cuda_sdpa`); cuDNN
workspaces and the CUDA caching allocator's rounding are not modelled (a note says so).
"""

from __future__ import annotations

import contextlib
import copy
import gc
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from estimator.errors import BadOptionError, InputError, UnsupportedError
from estimator.options import Device, DType, Mode, Optimizer, parse_dtypes
from estimator.peak.components import Component
from estimator.result import Estimate, Row
from estimator.weights import measure, training_adam_bytes

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


class _CpuKernelWorkspace(TorchDispatchMode):
    """The CPU kernels' hidden allocations, replayed as fake tensors.

    Matrix products: BLAS needs each matrix operand to have a unit stride in one of its last two
    dimensions and a leading dimension at least its size; ``aten::mm``/``addmm``/``bmm`` copy any
    other operand (the expanded grad of ``output.sum()``, stride 0) into a temporary while the
    result exists.

    Convolutions: on CPU, float32 2-d/3-d convolutions run in oneDNN (``aten::mkldnn_convolution``), which
    reorders operands into channel-blocked layouts (channels padded to a multiple of 16) in
    buffers the aten op never returns. Measured with the CPU profiler's memory events (torch
    2.14, x86-64):

    - forward: the input is reordered when it has 16 or more channels per group (first layers,
      with 1-3 channels, read it as is); the output is computed into a blocked buffer and then
      copied into the returned tensor, so the blocked output and the result coexist briefly.
    - backward: a non-contiguous grad_output (the grad of ``output.sum()`` is an expanded
      scalar) is first copied into a dense tensor that lives through the whole kernel;
      with a grad input: a blocked copy of grad_output while the grad input is computed;
      then, for the weight gradient, blocked copies of grad_output and of the input coexist with
      the (already allocated) grad input. With fewer than 16 input channels and no grad input
      (a first layer), only a small scratch buffer is used (not modelled).

    Known limits: the exact layouts are oneDNN's choice for the machine's ISA and the shapes;
    this is the common AVX2/AVX-512 behaviour, checked against the allocator to 2% on the
    examples in ``tests/test_module_ground_truth.py``.
    """

    def __init__(self, tracker: Any) -> None:
        super().__init__()
        self.tracker = tracker

    def _alloc(self, nbytes: int) -> torch.Tensor | None:
        if nbytes <= 0:
            return None
        previous = self.tracker.new_component
        self.tracker.new_component = Component.TEMPORARIES
        try:
            return torch.empty(nbytes, dtype=torch.uint8)
        finally:
            self.tracker.new_component = previous

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        if func is torch.ops.aten.convolution.default and _uses_onednn(args[0], args[1], args[6]):
            x, w = args[0], args[1]
            cin = w.shape[1]
            out_b = _blocked_bytes(_conv_out_elems(x, w, args), w.shape[0], x.element_size())
            reorder = self._alloc(_nbytes(x)) if cin >= 16 else None
            blocked = self._alloc(out_b)
            del reorder
            out = func(*args, **kwargs)
            del blocked
            return out
        if func is torch.ops.aten.convolution_backward.default and _uses_onednn(args[1], args[2], args[7]):
            grad_out, x, w = args[0], args[1], args[2]
            mask = args[-1]
            cin = w.shape[1]
            g_b = _blocked_bytes(grad_out.numel(), w.shape[0], grad_out.element_size())
            # The kernel makes grad_output contiguous first (the grad of a sum is an expanded scalar).
            dense = None if grad_out.is_contiguous() else self._alloc(_nbytes(grad_out))
            if mask[0]:
                ws = self._alloc(g_b)
                del ws
            out = func(*args, **kwargs)
            if mask[1] and (mask[0] or cin >= 16):
                g2 = self._alloc(g_b)
                x2 = self._alloc(_blocked_bytes(x.numel(), cin, x.element_size()) if cin >= 16 else _nbytes(x))
                del g2, x2
            del dense
            return out
        if func in _MATMUL_OPERANDS and isinstance(args[0], torch.Tensor) and args[0].device.type == "cpu":
            out = func(*args, **kwargs)
            for i in _MATMUL_OPERANDS[func]:
                operand = args[i]
                if isinstance(operand, torch.Tensor) and not _blas_compatible(operand):
                    copy_ = self._alloc(_nbytes(operand))
                    del copy_
            return out
        return func(*args, **kwargs)


_MATMUL_OPERANDS = {
    torch.ops.aten.mm.default: (0, 1),
    torch.ops.aten.bmm.default: (0, 1),
    torch.ops.aten.addmm.default: (1, 2),
    torch.ops.aten.baddbmm.default: (1, 2),
}


def _blas_compatible(t: torch.Tensor) -> bool:
    if t.dim() < 2:
        return True
    rows, cols = t.shape[-2], t.shape[-1]
    s_rows, s_cols = t.stride()[-2], t.stride()[-1]
    if rows <= 1 or cols <= 1:
        return True
    return (s_cols == 1 and s_rows >= cols) or (s_rows == 1 and s_cols >= rows)


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _blocked_bytes(elems: int, channels: int, itemsize: int) -> int:
    """Bytes of a tensor of ``elems`` elements once its channels are padded to a multiple of 16."""
    if channels <= 0:
        return 0
    return elems // channels * (-(-channels // 16) * 16) * itemsize


def _conv_out_elems(x: torch.Tensor, w: torch.Tensor, args: Sequence[Any]) -> int:
    stride, padding, dilation = args[3], args[4], args[5]
    n = x.shape[0] * w.shape[0]
    for i, size in enumerate(x.shape[2:]):
        k = w.shape[2 + i]
        n *= (size + 2 * padding[i] - dilation[i] * (k - 1) - 1) // stride[i] + 1
    return n


def _uses_onednn(x: Any, w: Any, transposed: Any) -> bool:
    return (
        isinstance(x, torch.Tensor)
        and x.dtype == torch.float32
        and x.dim() in (4, 5)
        and not transposed
        and x.device.type == "cpu"
        and torch.backends.mkldnn.is_available()
    )


def _make_optimizer(params: list[nn.Parameter], optimizer: Optimizer, device: Device) -> torch.optim.Optimizer:
    # CPU tensors default to the for-loop implementations, CUDA tensors to the multi-tensor ones.
    foreach = device is Device.CUDA
    if optimizer is Optimizer.ADAMW:
        return torch.optim.AdamW(params, lr=1e-3, foreach=foreach)
    if optimizer is Optimizer.SGD:
        return torch.optim.SGD(params, lr=1e-3, foreach=foreach)
    if optimizer is Optimizer.ADAFACTOR:
        return torch.optim.Adafactor(params, lr=1e-3, foreach=foreach)
    raise UnsupportedError(f"optimizer {optimizer.value} is not simulated for modules; use adamw, sgd or adafactor.")


def _state_tensors(optimizer: torch.optim.Optimizer) -> Iterator[torch.Tensor]:
    for state in optimizer.state.values():
        for value in state.values():
            if isinstance(value, torch.Tensor):
                yield value


def _unique(tensors: Any) -> list[torch.Tensor]:
    return list({id(t): t for t in tensors}.values())


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
) -> tuple[int, dict[str, int]]:
    """Run one step of ``model`` (built on meta, consumed) on fake inputs; return peak and components."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from estimator.peak.materialize import materialize
    from estimator.peak.tracker import StorageTracker

    fake_mode = FakeTensorMode(static_shapes=True)
    materialize(model, fake_mode)
    tracker = StorageTracker()
    if device is Device.CPU:
        workspace: Any = _CpuKernelWorkspace(tracker)
    else:
        from estimator.peak.cuda_sdpa import cuda_sdpa  # the simulator's model of CUDA's SDPA kernels

        workspace = cuda_sdpa()
    autocast: Any = (
        torch.autocast("cpu", dtype=autocast_dtype) if autocast_dtype is not None else contextlib.nullcontext()
    )
    try:
        with fake_mode, tracker, workspace:
            for t in _unique([*model.parameters(), *model.buffers()]):
                tracker.register(t, Component.WEIGHTS)
            tracker.new_component = Component.INPUTS
            inputs = [_make_input(size, input_dtype) for size in sizes]
            if mode is Mode.TRAINING:
                model.train()
                params = [p for p in _unique(model.parameters()) if p.requires_grad]
                if not params:
                    raise InputError("the module has no trainable parameters; use mode='inference'.")
                opt = _make_optimizer(params, optimizer, device)  # type: ignore[arg-type]
                for step in range(2):
                    if step == 1:
                        tracker.reset_peak()
                    tracker.new_component = Component.ACTIVATIONS
                    with autocast:
                        output = model(*inputs)
                        loss = loss_fn(output) if loss_fn is not None else first_tensor(output).sum()
                    del output
                    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
                        raise InputError("loss_fn must return a scalar tensor.")
                    tracker.new_component = Component.TEMPORARIES
                    loss.backward()
                    del loss
                    tracker.relabel((p.grad for p in params if p.grad is not None), Component.GRADIENTS)
                    opt.step()
                    tracker.relabel(_state_tensors(opt), Component.OPTIMIZER_STATES)
                    opt.zero_grad(set_to_none=True)
                snap = tracker.snapshot()
                del opt
            else:
                model.eval()
                tracker.new_component = Component.ACTIVATIONS
                with torch.no_grad(), autocast:
                    output = model(*inputs)
                snap = tracker.snapshot()
                del output
            del inputs
    finally:
        FakeTensorMode.cache_clear()  # the dispatch cache is process-wide
        gc.collect()
    return snap.peak_bytes, dict(snap.components)


def _make_input(size: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    if dtype.is_floating_point or dtype.is_complex:
        return torch.randn(size, dtype=dtype)
    return torch.zeros(size, dtype=dtype)


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
        mode=parsed_mode.value,
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
        peak, components = simulate_module(
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
    if mode is Mode.TRAINING:
        notes.append(f"training: 2 steps of forward, loss, backward and {optimizer.value}; peak of step 2")
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
        components=components,
        notes=tuple(notes),
    )
