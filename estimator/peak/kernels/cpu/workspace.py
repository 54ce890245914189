"""Kernel-internal buffers that fake tensors cannot see: the one CPU model, used by every path.

A fake tensor only knows an op's outputs; some real kernels allocate more, through the same
allocator, and free it before returning. Those buffers count in the allocator's peak. A model
gives, for one op, a :class:`~estimator.peak.sim.tracker.KernelScratch`: the extra bytes held at the
kernel's high point *before* its outputs are allocated, and *while* they are (the tracker adds
each on top of the live bytes of that instant, as a transient labelled ``temporaries``).

CPU, measured with ``torch.profiler``'s memory events on torch 2.14 (x86-64, AVX-512 and
``ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2``), for 4-d and 5-d floating-point
convolutions, which run in oneDNN (``aten::mkldnn_convolution``), and 3-d ones (Conv1d), which ATen
runs as 2-d ones of height 1 (``view1d_as_2d``; wav2vec2's feature encoder: exact in inference). oneDNN computes on
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
  4 weights each (``estimator.peak.kernels.cpu.isa.cpu_threads()``: the simulated run's threads).
- bfloat16 backward, NCHW, ungrouped, AVX-512 (oneDNN ``jit_bf16``/``jit_bf16_1x1``): the
  weight-gradient kernel also holds its scratchpad (:mod:`estimator.peak.kernels.cpu.onednn_bf16`), which coexists
  with the blocked grad_output, input and weight gradient.
- Matrix products: BLAS needs each matrix operand to have a unit stride in one of its last two
  dimensions and a leading dimension at least its size; ``aten::mm``/``addmm``/``bmm``/
  ``baddbmm`` copy any other operand (the expanded grad of ``output.sum()``, stride 0) into a
  temporary while the result exists.
- bfloat16 matrix products, AVX-512 without bfloat16 instructions (oneDNN ``gemm:jit:bf16``): above
  16*16*16 multiply-adds a float32 accumulator in oneDNN's scratchpad, held while the result exists
  (:mod:`estimator.peak.kernels.cpu.onednn_bf16`).

- float32 convolutions ATen keeps out of oneDNN (batch 1, at most 20,480 input elements, ungrouped, kernel not
  above 3x3; or one thread and a 1x1 kernel: ``use_mkldnn``) run in its ``slow_conv2d``, which holds its im2col
  columns (``C_in * kh * kw`` x output positions; backward: for the weight gradient only) and contiguous copies of
  non-contiguous operands through the kernel (:func:`_native_columns`; measured exact on Conv1d(64, 512, 3) over
  51 and 151 frames and Conv1d(32, 64, 3) over 100, a diarization head's sub-pixel convolution).

- Depthwise convolutions on channels-last input, weight gradient: oneDNN's generic grouped kernel
  pads each group's single channel to the block, computing into a buffer 256 (AVX-512) or 64
  (AVX2) times the weight, plus its scratchpad: :mod:`estimator.peak.kernels.cpu.depthwise` (measured exact on
  17 shapes; timm's ConvNeXt training, 17% low without it, is now exact).

Known limits (not modelled): small fixed-size scratch (tens of KiB), the first-layer backward's
scratch, depthwise weight gradients when threads >= groups (per-thread reduction buffers), and every
CUDA workspace (cuDNN, cuBLAS), which belongs to the CUDA runtime accounting, outside
``peak_bytes``. 16-bit convolutions are otherwise given the float32 layouts; oneDNN's bfloat16
1x1 convolutions (``jit_bf16_1x1``) also hold float32 output and grad-input accumulators and a
larger weight-gradient scratchpad than modelled when they compute a grad input (Conv2d(32, 48, 1)
on 2x32x12x12 behind a first layer: 25.6% low, see ``tests/test_workspace_bf16.py``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import torch

from estimator.peak.kernels.cpu.conv_gemm import wide_patch_weight_grad_scratch
from estimator.peak.kernels.cpu.depthwise import depthwise_backward_scratch
from estimator.peak.kernels.cpu.flash import (
    FLASH_CPU,
    FLASH_CPU_BACKWARD,
    SAFE_SOFTMAX,
    flash_attention_backward_scratch,
    flash_attention_scratch,
    safe_softmax_scratch,
)
from estimator.peak.kernels.cpu.isa import block_size, cpu_threads
from estimator.peak.kernels.cpu.onednn_bf16 import bf16_matmul_accumulator as _bf16_matmul_accumulator
from estimator.peak.kernels.cpu.onednn_bf16 import bf16_weight_grad_scratchpad as _bf16_weight_grad_scratchpad
from estimator.peak.kernels.cpu.onednn_bf16 import onednn_bf16_gemm as _onednn_bf16_gemm  # noqa: F401  # read here by tests/test_workspace_bf16.py
from estimator.peak.kernels.scratch import KernelScratch

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


def cpu_workspace(func: Any, args: tuple[Any, ...], out: Any) -> KernelScratch | None:
    """The hidden buffers of the CPU kernel behind ``func``; ``None`` if none are modelled."""
    if func is _CONV and _native_conv(args[0], args[1], args[3], args[5], args[6], args[8]):
        return _native_columns(args[0], args[1], args[3], args[4], out, backward=False)
    if func is _CONV_BACKWARD and _native_conv(args[1], args[2], args[4], args[6], args[7], args[9]):
        return _native_columns(args[1], args[2], args[4], args[5], args[10], backward=True, grad_out=args[0])
    if func is _CONV and _uses_onednn(args[0], args[6]):
        return _conv_forward(args[0], args[1], args[8], out)
    if func is _CONV_BACKWARD and _uses_onednn(args[1], args[7]):
        conv = _conv_backward(args[0], args[1], args[2], args[9], args[10], args[4], args[5], args[6])
        extra = depthwise_backward_scratch(args, out)  # channels-last depthwise weight gradients (depthwise.py)
        extra += wide_patch_weight_grad_scratch(args)  # wide first-layer kernels' gemm scratchpad (conv_gemm.py)
        return dataclasses.replace(conv, with_outputs=conv.with_outputs + extra) if extra else conv
    if func in _MATMUL_OPERANDS:
        a, b = (args[i] for i in _MATMUL_OPERANDS[func])
        copies = [_nbytes(t) for t in (a, b) if isinstance(t, torch.Tensor) and not _blas_compatible(t)]
        scratch = max(copies, default=0) + _bf16_matmul_accumulator(a, b, out)
        return KernelScratch(with_outputs=scratch) if scratch else None
    if func is FLASH_CPU:  # per-thread blocks of CPU flash attention (flash_cpu.py)
        return flash_attention_scratch(args)
    if func is FLASH_CPU_BACKWARD:  # and of its backward
        return flash_attention_backward_scratch(args)
    if func is SAFE_SOFTMAX:  # the math attention's softmax: its -inf masks (flash_cpu.py)
        return safe_softmax_scratch(args)
    return None



def _conv_forward(x: torch.Tensor, w: torch.Tensor, groups: int, out: torch.Tensor) -> KernelScratch:
    w_b = _weight_blocked(w)
    if _channels_last(x, w):
        copy = _weight_copy(w)
        scratch = w_b + (_nbytes(x) if groups == 1 else 0)
        return KernelScratch(before_outputs=copy, with_outputs=copy + scratch)
    out_b = _blocked(out)
    x_b = _blocked_input(x) if x.shape[1] >= _REORDER_CHANNELS else 0
    dense = _dense_copy(x)
    return KernelScratch(before_outputs=dense + x_b + w_b + out_b, with_outputs=dense + out_b)


def _dense_copy(x: torch.Tensor) -> int:
    """ATen's ``_convolution`` makes a strided input contiguous before oneDNN sees it (``input.contiguous(
    backend_memory_format)``, inside the op): a copy of the input, alive through the kernel (VideoMAE's
    ``pixel_values.permute(0, 2, 1, 3, 4)`` into its Conv3d: measured 786,432 B at 16 frames of 64 px)."""
    return 0 if x.is_contiguous() else _nbytes(x)


def _conv_backward(
    grad_out: torch.Tensor,
    x: torch.Tensor,
    w: torch.Tensor,
    groups: int,
    mask: Sequence[bool],
    stride: Sequence[int] = (),
    padding: Sequence[int] = (),
    dilation: Sequence[int] = (),
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
    pad = _bf16_weight_grad_scratchpad(grad_out, x, w, stride, padding, dilation, groups, mask) if mask[1] else 0
    if mask[1] and (mask[0] or w.shape[1] >= _REORDER_CHANNELS):
        scratch = g_b + (x_b if groups == 1 else _nbytes(x))  # grouped: an input-sized scratch beside the blocked grad_output
        weight_phase = max(scratch + pad, w_b, _small_input_reduction(x, w, groups))
    elif pad:  # a bfloat16 first layer: the blocked grad_output and the kernel's scratchpad
        weight_phase = g_b + pad
    with_outputs = dense + max(x_b if mask[0] else 0, weight_phase)
    return KernelScratch(before_outputs=before, with_outputs=with_outputs)



def _small_input_reduction(x: torch.Tensor, w: torch.Tensor, groups: int) -> int:
    """Below AVX-512, a weight gradient whose input is smaller than the kernel in some spatial
    dimension is reduced in per-thread buffers: 4 weights' worth per thread (measured 4.0x with 1
    thread, 8.0-8.5x with 2, 3x3 to 7x7 kernels)."""
    if block_size() != 8 or groups != 1 or not any(s < k for s, k in zip(x.shape[2:], w.shape[2:], strict=True)):
        return 0
    return 4 * cpu_threads() * _nbytes(w)


def _uses_onednn(x: Any, transposed: Any) -> bool:
    """PyTorch runs this convolution in oneDNN (``use_mkldnn`` in ATen's Convolution.cpp): a float32
    input, or a 16-bit one where oneDNN has kernels for it on this CPU (bfloat16 needs AVX-512;
    below it, and for float16 without AVX512-FP16/AMX, PyTorch's own kernels run: not modelled)."""
    if not (isinstance(x, torch.Tensor) and x.is_floating_point() and x.dim() in (3, 4, 5) and not transposed
            and x.device.type == "cpu" and torch.backends.mkldnn.is_available()):
        return False
    if x.dtype == torch.bfloat16:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    if x.dtype == torch.float16:
        return bool(torch.ops.mkldnn._is_mkldnn_fp16_supported())
    return True


_NATIVE_MAX_ELEMENTS = 20480  # ATen's use_mkldnn: a float32 batch-1 input at most this large runs natively


def _native_conv(x: Any, w: Any, stride: Sequence[int], dilation: Sequence[int], transposed: Any, groups: int) -> bool:
    """A float32 convolution that ATen runs in its own ``slow_conv2d`` rather than oneDNN (``use_mkldnn`` in
    ATen's Convolution.cpp, on the 4-d view it takes of a Conv1d): one thread and a 1x1 kernel, or ungrouped, a
    kernel not wider and higher than 3, batch 1 and at most 20,480 input elements (wav2vec2's or a diarization
    head's batch-1 Conv1d over tens of frames)."""
    if not (_uses_onednn(x, transposed) and x.dtype == torch.float32 and x.dim() in (3, 4) and isinstance(w, torch.Tensor)):
        return False
    shape = (*x.shape[:2], 1, x.shape[2]) if x.dim() == 3 else tuple(x.shape)
    kh, kw = (1, int(w.shape[-1])) if w.dim() == 3 else (int(w.shape[-2]), int(w.shape[-1]))
    strided_or_dilated = any(int(v) != 1 for v in (*stride, *dilation))
    onednn_worth = strided_or_dilated or shape[0] >= 16 or kw != 1 or kh != 1 or cpu_threads() > 1
    native_faster = not (groups > 1 or (kw > 3 and kh > 3) or shape[0] > 1
                         or shape[0] * shape[1] * shape[2] * shape[3] > _NATIVE_MAX_ELEMENTS)
    return not onednn_worth or native_faster


def _native_columns(x: torch.Tensor, w: torch.Tensor, stride: Sequence[int], padding: Sequence[int], out_or_mask: Any,
                    *, backward: bool, grad_out: Any = None) -> KernelScratch | None:
    """``slow_conv2d``'s buffers, held through the kernel (measured on Conv1d(64, 512, 3) over 151 frames and
    Conv1d(32, 64, 3) over 100, contiguous and transposed operands, every output mask): contiguous copies of a
    non-contiguous input (and, backward, grad_output), and its im2col columns (``C_in * kh * kw`` x output
    positions per sample; none for an unpadded, unstrided 1x1 kernel), which the backward recomputes only for
    the weight gradient."""
    kernel = tuple(int(k) for k in w.shape[2:])
    trivial = all(k == 1 for k in kernel) and all(int(v) == 1 for v in stride) and all(int(v) == 0 for v in padding)
    spatial = [int(v) for v in x.shape[2:]]
    positions = 1
    for size, k, st, pad in zip(spatial, kernel, stride, padding, strict=False):
        positions *= (size + 2 * int(pad) - k) // int(st) + 1
    columns = 0 if trivial else int(x.shape[0]) * int(w.shape[1]) * math.prod(kernel) * positions * x.element_size()
    copies = 0 if x.is_contiguous() else _nbytes(x)
    if backward:
        copies += 0 if grad_out is None or grad_out.is_contiguous() else _nbytes(grad_out)
        columns = columns if bool(out_or_mask[1]) else 0
    extra = copies + columns
    return KernelScratch(before_outputs=extra, with_outputs=extra) if extra else None


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
