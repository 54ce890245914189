"""The weight-gradient scratch of oneDNN's depthwise convolution backward on channels-last input.

Measured with ``torch.profiler``'s memory events on torch 2.14 / oneDNN 3.12 (x86-64, AVX-512, and
``ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2``), calling ``aten.convolution_backward`` on
depthwise 2-d convolutions (``groups == C``, weight ``(C, 1, k, k)``, padding ``k // 2``,
channels-last input and weight, output mask ``(True, True, True)``), C in 24/40/80/160/320,
spatial 2-16, batch 1-4, kernel 3/4/5/7, 1 and 2 threads, float32 and bfloat16.
``ONEDNN_VERBOSE=1`` shows which oneDNN primitives run: the grad input always comes from the
depthwise kernel ``jit_dw`` (backward_data, small scratch), but the weight gradient does only for
kernels at most 3 wide that fit the input (``jit_uni_dw_conv_bwd_weights`` ``init_conf``: ``kw <= 3``,
no dilation, ``stride_w <= kw``, pads at most ``k // 2``, ``ih >= kh + (-t_pad mod stride_h)``);
every other depthwise weight gradient (ConvNeXt's 7x7, MobileNet's 5x5) runs in the generic
grouped kernel, which treats each group as a dense convolution with 1 input and 1 output channel,
each padded to the channel block:

- AVX-512, float32 (``jit:avx512_core``) and bfloat16 (``jit_bf16:avx512_core``): the weight
  gradient is computed into a blocked ``aBCde16c16b`` buffer, ``groups * 16 * 16 * kh * kw``
  elements of the input's dtype, 256x the weight, independent of batch, spatial size and threads
  (e.g. 16,056,320 B for ConvNeXt-atto's 320-channel 7x7 layer in float32, 8,028,160 B in
  bfloat16). float32: its scratchpad holds the bias gradient padded per group (``groups*16*4 + 128``);
  bfloat16: the scratchpad of ``jit_bf16`` (what ``onednn_bf16.bf16_weight_grad_scratchpad`` computes
  for ungrouped convolutions, here per group: transposed input rows ``tr_iw * 16 * ih`` and
  grad_output rows ``round2(ow) * 16 * oh`` per group, float32 weight+bias accumulators
  ``groups * (16*16*kh*kw + 16)``, a barrier, 128 B slack per piece); oneDNN's ``balance`` gives
  the whole kernel one thread while threads < groups, so the thread count does not matter.
  Exact to the byte, e.g. bfloat16 C=40 on 16x16, 7x7: scratchpad 2,755,464 B (1 and 2 threads).
- AVX2, float32: ``jit:avx2`` with an ``aBCde8c8b`` buffer (``groups * 8 * 8 * kh * kw`` floats)
  when the input is at least the kernel in every spatial dimension; otherwise gemm
  (``x64:gemm:jit``, nhwc), whose scratchpad (``gemm_convolution_utils::init_conf``) is, per
  thread (all threads when ``oh*ow / threads < 256`` and ``batch > 1 or groups > 2``, else one):
  the im2col column ``kh*kw*oh*ow`` floats, a weight-reduction buffer of ``4 * weight bytes``
  (oneDNN books ``weights_d.size()`` floats), and ``ih*iw`` floats, 128 B slack per piece; its weight
  gradient goes through a weight-sized plain buffer. bfloat16 below AVX-512 runs in PyTorch's own
  kernels (not modelled: 0).

When it is live: the grad input (an output) is allocated first, then the weight-gradient buffer
and the scratchpad; the scratchpad is freed, the grad bias and grad weight outputs are allocated,
a bias-sized and a weight-sized temporary are copied through, and the buffer is freed last. So it
is held *with the outputs*; above all outputs, the high point is
``G + max(scratchpad - weight, bias + weight)`` (``G`` the weight-gradient buffer, ``weight`` and
``bias`` the gradient bytes): at the scratchpad the grad weight/bias outputs do not exist yet, at
the end a bias- and a weight-sized temporary coexist with them.

:func:`depthwise_backward_scratch` returns that high point *minus* the blocked weight
``workspace._conv_backward`` already gives every channels-last backward (``_weight_blocked(w)``:
the channel-padded weight), so it adds to ``KernelScratch.with_outputs``.

Not modelled: threads >= groups (oneDNN then splits the minibatch and adds per-thread reduction
buffers), 3-d convolutions, 1x1 depthwise kernels, the small ``jit_dw`` scratch (a few KiB).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from estimator.peak.kernels.cpu.isa import block_size, cpu_threads

__all__ = ["depthwise_backward_scratch"]

_ALIGN = 128  # oneDNN books each scratchpad piece with this much slack
_BARRIER = 2 * 4096  # a page-aligned barrier context and its alignment slack


def depthwise_backward_scratch(args: Sequence[Any], outputs: Any = None) -> int:
    """Bytes the oneDNN weight-gradient kernel of a channels-last depthwise
    ``aten.convolution_backward.default`` holds at its high point, with the outputs, on top of the
    channel-padded weight already modelled; 0 where the rule does not apply."""
    if len(args) < 11:
        return 0
    grad_out, x, w, _, stride, padding, dilation, transposed, _, groups, mask = args[:11]
    if not all(isinstance(t, torch.Tensor) for t in (grad_out, x, w)) or transposed:
        return 0
    if x.device.type != "cpu" or x.dim() != 4 or not torch.backends.mkldnn.is_available():
        return 0
    groups, mask = int(groups), [bool(m) for m in mask]
    c, oc = x.shape[1], w.shape[0]
    if groups <= 1 or w.shape[1] != 1 or c != groups or oc % groups or not mask[1] or x.numel() == 0:
        return 0
    if not _channels_last(x, w):
        return 0
    kh, kw = w.shape[2], w.shape[3]
    if kh * kw == 1 or _jit_dw_weights(x, kh, kw, list(stride), list(padding), list(dilation), grad_out):
        return 0

    block = block_size()
    ocg = oc // groups
    taps = kh * kw
    elt = x.element_size()
    weight = w.numel() * elt
    bias = oc * elt if len(mask) > 2 and mask[2] else 0
    threads = cpu_threads()
    if x.dtype == torch.float32:
        if block == 16 or all(s >= k for s, k in zip(x.shape[2:], (kh, kw), strict=True)):
            buffer = groups * _round_up(ocg, block) * block * taps * 4
            pad = groups * _round_up(ocg, block) * 4 + _ALIGN if bias else 0
        else:  # AVX2, input smaller than the kernel: gemm
            buffer = weight
            pad = _gemm_scratchpad(x, grad_out, weight, taps, groups, threads)
    elif x.dtype == torch.bfloat16 and block == 16 and _onednn_bf16():
        buffer = groups * _round_up(ocg, 16) * 16 * taps * 2
        pad = _bf16_scratchpad(x, grad_out, kh, kw, list(stride), list(padding), list(dilation), groups, ocg, bool(bias))
    else:
        return 0
    high = buffer + max(pad - weight, bias + weight)
    return max(0, high - _round_up(oc, block) * taps * elt)


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m


def _channels_last(x: torch.Tensor, w: torch.Tensor) -> bool:
    from torch._prims_common import suggest_memory_format

    return any(suggest_memory_format(t) == torch.channels_last for t in (x, w))


def _onednn_bf16() -> bool:
    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def _jit_dw_weights(x: torch.Tensor, kh: int, kw: int, stride: list[int], padding: list[int], dilation: list[int], grad_out: torch.Tensor) -> bool:
    """Whether oneDNN's depthwise weight-gradient kernel (``jit_uni_dw_conv_bwd_weights``) takes it."""
    ih, iw = x.shape[2], x.shape[3]
    oh, ow = grad_out.shape[2], grad_out.shape[3]
    sh, sw = (stride[0], stride[-1]) if stride else (1, 1)
    th, tw = (padding[0], padding[-1]) if padding else (0, 0)
    if any(d != 1 for d in dilation) or kw > 3 or sw > kw:
        return False
    b_pad = (oh - 1) * sh + kh - 1 - (ih + th - 1)
    r_pad = (ow - 1) * sw + kw - 1 - (iw + tw - 1)
    max_h, max_w = kh // 2, kw // 2
    return (
        th <= max_h and b_pad <= max_h and tw <= max_w and r_pad <= max_w
        and ih >= kh + (-th) % sh
        and (th <= 1 or th % sh == 0) and (b_pad <= 1 or b_pad % sh == 0)
    )  # fmt: skip


def _gemm_scratchpad(x: torch.Tensor, grad_out: torch.Tensor, weight: int, taps: int, groups: int, threads: int) -> int:
    """oneDNN's nhwc gemm weight-gradient scratchpad (float32): im2col, weight reduction, input rows."""
    os_ = grad_out.shape[2] * grad_out.shape[3]
    is_ = x.shape[2] * x.shape[3]
    outer = os_ // threads < 256 and (x.shape[0] != 1 or groups > 2)
    nthr = threads if outer else 1
    pieces = [nthr * taps * os_ * 4, nthr * weight * 4, nthr * is_ * 4]
    return sum(p + _ALIGN for p in pieces if p)


def _bf16_scratchpad(
    x: torch.Tensor,
    grad_out: torch.Tensor,
    kh: int,
    kw: int,
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    groups: int,
    ocg: int,
    with_bias: bool,
) -> int:
    """The ``jit_bf16`` weight-gradient scratchpad for a grouped (1 input channel per group)
    convolution, one thread (oneDNN's ``balance`` while threads < groups)."""
    ih, iw = x.shape[2], x.shape[3]
    oh, ow = grad_out.shape[2], grad_out.shape[3]
    sh, sw = (stride[0], stride[-1]) if stride else (1, 1)
    th, tw = (padding[0], padding[-1]) if padding else (0, 0)
    dh, dw = (dilation[0], dilation[-1]) if dilation else (1, 1)
    r_pad = max(0, (ow - 1) * sw + (kw - 1) * dw + 1 - (iw + tw))
    tr_pad = _round_up(max(tw, r_pad + 1), 2)
    tr_iw = _round_up(-(-iw // sw) + tr_pad, 2) * sw
    tr_ow = _round_up(ow, 2)
    nb_oc = -(-ocg // 16)
    total = 0

    def book(nbytes: int, align: int = _ALIGN) -> None:
        nonlocal total
        total += nbytes + align if nbytes else 0

    book((tr_iw * 16 * ih * groups + tr_pad) * 2)  # transposed input rows (nthr_mb = 1)
    book(tr_ow * 16 * oh * groups * nb_oc * 2)  # transposed grad_output rows
    weights = groups * nb_oc * 16 * 16 * kh * kw
    book((weights + (groups * nb_oc * 16 if with_bias else 0)) * 4)  # float32 accumulators
    book(_BARRIER // 2, _BARRIER // 2)
    return total
