"""Kernel-internal buffers that fake tensors cannot see: the one CPU model, used by every path.

A fake tensor only knows an op's outputs; some real kernels allocate more, through the same
allocator, and free it before returning. Those buffers count in the allocator's peak. A model
gives, for one op, a :class:`~estimator.peak.tracker.KernelScratch`: the extra bytes held at the
kernel's high point *before* its outputs are allocated, and *while* they are (the tracker adds
each on top of the live bytes of that instant, as a transient labelled ``temporaries``).

CPU, measured with ``torch.profiler``'s memory events on torch 2.14 (x86-64, AVX-512 and
``ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2``), for 4-d and 5-d floating-point
convolutions, which run in oneDNN (``aten::mkldnn_convolution``). oneDNN computes on
channel-blocked layouts: channels padded to a multiple of the block, 16 with AVX-512, 8 below it.

- Forward, contiguous (NCHW) input: the input is reordered into a blocked copy when it has 16 or
  more channels (first layers, with 1-3 channels, are read as they are; depthwise layers are
  reordered too), the weight is reordered, the output is computed into a blocked buffer and
  copied into the returned tensor, so the blocked output and the result coexist briefly:
  ``before = input_blocked + weight_blocked + output_blocked``, ``with = output_blocked``.
- Forward, channels-last input: the kernel writes the result directly; the weight is made
  channels-last (a copy, unless it already is) and reordered, and a dense (``groups == 1``)
  convolution holds about an input's worth of scratch besides (measured: 1x1 convolutions hold
  ``weight + input`` bytes, 2x2 ones ``weight`` + 12 KiB): ``before = weight_copy``,
  ``with = weight_copy + weight_blocked (+ input)``.
- Backward: a grad_output that is not dense in the kernel's layout (the grad of ``out.sum()``
  is an expanded scalar) is first copied into a dense tensor that lives through the kernel.
  NCHW, with a grad input: blocked copies of grad_output and the weight and a blocked grad
  input, then the result grad input while the blocked one still exists; for the weight
  gradient, blocked copies of grad_output and of the input (one input-sized scratch for grouped
  convolutions), and the blocked weight gradient, copied into the result at the end. With fewer
  than 16 input channels per group and no grad input (a first layer) only small scratch is used.
  Below AVX-512 (AVX2), when the input is smaller than the kernel in a spatial dimension (a
  ResNet's last stage on small images), the weight gradient is reduced in per-thread buffers of
  4 weights each (``torch.get_num_threads()`` of this process is taken as the run's).
- Matrix products: BLAS needs each matrix operand to have a unit stride in one of its last two
  dimensions and a leading dimension at least its size; ``aten::mm``/``addmm``/``bmm``/
  ``baddbmm`` copy any other operand (the expanded grad of ``output.sum()``, stride 0) into a
  temporary while the result exists.

Known limits (not modelled): small fixed-size scratch (tens of KiB), the first-layer backward's
scratch, the depthwise-convolution backward on channels-last input (an im2col-like buffer whose
size depends on the ISA and the thread count; timm's ConvNeXt training is ~17% low because of
it), the native (non-oneDNN) convolution kernels PyTorch picks for batch-1 tiny inputs, and every
CUDA workspace (cuDNN, cuBLAS), which belongs to the CUDA runtime accounting, outside
``peak_bytes``. 16-bit convolutions are given the float32 layouts (not measured).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import torch

from estimator.peak.tracker import KernelScratch

__all__ = ["block_size", "cpu_workspace"]

_CONV = torch.ops.aten.convolution.default
_CONV_BACKWARD = torch.ops.aten.convolution_backward.default
_MATMUL_OPERANDS = {
    torch.ops.aten.mm.default: (0, 1),
    torch.ops.aten.bmm.default: (0, 1),
    torch.ops.aten.addmm.default: (1, 2),
    torch.ops.aten.baddbmm.default: (1, 2),
}
_REORDER_CHANNELS = 16  # inputs with fewer channels are read by oneDNN as they are


@functools.cache
def block_size() -> int:
    """oneDNN's channel block on this CPU: 16 with AVX-512, 8 with AVX2 or less."""
    return 16 if torch.backends.cpu.get_cpu_capability().startswith("AVX512") else 8


def cpu_workspace(func: Any, args: tuple[Any, ...], out: Any) -> KernelScratch | None:
    """The hidden buffers of the CPU kernel behind ``func``; ``None`` if none are modelled."""
    if func is _CONV and _uses_onednn(args[0], args[6]):
        return _conv_forward(args[0], args[1], args[8], out)
    if func is _CONV_BACKWARD and _uses_onednn(args[1], args[7]):
        return _conv_backward(args[0], args[1], args[2], args[9], args[10])
    if func in _MATMUL_OPERANDS:
        copies = [_nbytes(args[i]) for i in _MATMUL_OPERANDS[func] if isinstance(args[i], torch.Tensor) and not _blas_compatible(args[i])]
        return KernelScratch(with_outputs=max(copies)) if copies else None
    return None


def _conv_forward(x: torch.Tensor, w: torch.Tensor, groups: int, out: torch.Tensor) -> KernelScratch:
    w_b = _weight_blocked(w)
    if _channels_last(x, w):
        copy = _weight_copy(w)
        scratch = w_b + (_nbytes(x) if groups == 1 else 0)
        return KernelScratch(before_outputs=copy, with_outputs=copy + scratch)
    out_b = _blocked(out)
    x_b = _blocked_input(x) if x.shape[1] >= _REORDER_CHANNELS else 0
    return KernelScratch(before_outputs=x_b + w_b + out_b, with_outputs=out_b)


def _conv_backward(
    grad_out: torch.Tensor, x: torch.Tensor, w: torch.Tensor, groups: int, mask: Sequence[bool]
) -> KernelScratch:
    layout = torch.channels_last if x.dim() == 4 else torch.channels_last_3d
    channels_last = _channels_last(x, w)
    dense_now = grad_out.is_contiguous(memory_format=layout) if channels_last else grad_out.is_contiguous()
    dense = 0 if dense_now else _nbytes(grad_out)
    if channels_last:
        copy = _weight_copy(w)
        return KernelScratch(before_outputs=dense + copy, with_outputs=dense + copy + _weight_blocked(w))
    g_b, w_b, x_b = _blocked(grad_out), _weight_blocked(w), _blocked_input(x)
    before = dense + (g_b + w_b + x_b if mask[0] else 0)  # x_b: the blocked grad input
    weight_phase = 0
    if mask[1] and (mask[0] or w.shape[1] >= _REORDER_CHANNELS):
        scratch = g_b + x_b if groups == 1 else _nbytes(x)
        weight_phase = max(scratch, w_b, _small_input_reduction(x, w, groups))
    with_outputs = dense + max(x_b if mask[0] else 0, weight_phase)
    return KernelScratch(before_outputs=before, with_outputs=with_outputs)


def _small_input_reduction(x: torch.Tensor, w: torch.Tensor, groups: int) -> int:
    """Below AVX-512, a weight gradient whose input is smaller than the kernel in some spatial
    dimension is reduced in per-thread buffers: 4 weights' worth per thread (measured 4.0x with 1
    thread, 8.0-8.5x with 2, 3x3 to 7x7 kernels)."""
    if block_size() != 8 or groups != 1 or not any(s < k for s, k in zip(x.shape[2:], w.shape[2:], strict=True)):
        return 0
    return 4 * torch.get_num_threads() * _nbytes(w)


def _uses_onednn(x: Any, transposed: Any) -> bool:
    return (
        isinstance(x, torch.Tensor)
        and x.is_floating_point()
        and x.dim() in (4, 5)
        and not transposed
        and x.device.type == "cpu"
        and torch.backends.mkldnn.is_available()
    )


def _channels_last(x: torch.Tensor, w: torch.Tensor) -> bool:
    """PyTorch's choice (``mkldnn_conv_use_channels_last``): input or weight suggests channels-last."""
    from torch._prims_common import suggest_memory_format

    return any(suggest_memory_format(t) in (torch.channels_last, torch.channels_last_3d) for t in (x, w))


def _weight_copy(w: torch.Tensor) -> int:
    """A channels-last convolution first makes its weight channels-last too (a copy, if it is not)."""
    layout = torch.channels_last if w.dim() == 4 else torch.channels_last_3d
    return 0 if w.is_contiguous(memory_format=layout) else _nbytes(w)


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _padded(channels: int) -> int:
    block = block_size()
    return -(-channels // block) * block


def _blocked(t: torch.Tensor) -> int:
    """Bytes of ``t`` (N, C, ...) once its channels are padded to a multiple of the block."""
    channels = t.shape[1]
    if channels <= 0:
        return 0
    return _nbytes(t) // channels * _padded(channels)


def _blocked_input(x: torch.Tensor) -> int:
    """An input-shaped tensor in oneDNN's layout: blocked from 16 channels, plain below."""
    return _blocked(x) if x.shape[1] >= _REORDER_CHANNELS else _nbytes(x)


def _weight_blocked(w: torch.Tensor) -> int:
    """Bytes of a (O, I, ...) weight in oneDNN's layout: O padded, and I too from 16 channels."""
    o, i = w.shape[0], w.shape[1]
    if o <= 0 or i <= 0:
        return 0
    i_b = _padded(i) if i >= _REORDER_CHANNELS else i
    return _nbytes(w) // (o * i) * _padded(o) * i_b


def _blas_compatible(t: torch.Tensor) -> bool:
    if t.dim() < 2:
        return True
    rows, cols = t.shape[-2], t.shape[-1]
    s_rows, s_cols = t.stride()[-2], t.stride()[-1]
    if rows <= 1 or cols <= 1:
        return True
    return (s_cols == 1 and s_rows >= cols) or (s_rows == 1 and s_cols >= rows)


def cpu_kernels(optimizer: str) -> dict[Any, Any]:
    """Ops whose CPU kernel is written in Python with torch ops (run on the fakes, tracked like the
    model's code, so their temporaries count): bitsandbytes' 8-bit optimizer update, which on CPU
    dequantizes both moments to float32, updates them and quantizes them back."""
    if optimizer != "adamw8bit":
        return {}
    import bitsandbytes  # noqa: F401  # registers the ops
    from bitsandbytes.backends.cpu import ops as bnb_cpu

    return {torch.ops.bitsandbytes.optimizer_update_8bit_blockwise.default: bnb_cpu._optimizer_update_8bit_blockwise_cpu}
