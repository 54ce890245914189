"""oneDNN's bfloat16 scratchpads on CPU: the part of :mod:`estimator.peak.kernels.cpu.workspace` (the one CPU kernel-scratch
model) that computes the buffers oneDNN books for its AVX-512 bfloat16 kernels, as oneDNN's own ``init_conf``/
``balance``/``init_scratchpad`` and ``get_scratchpad_num_elements`` do. Measured with ``torch.profiler``'s memory
events on torch 2.14 (x86-64, AVX-512), as the rest of that model.

- bfloat16 backward, NCHW, ungrouped, AVX-512 (oneDNN ``jit_bf16``/``jit_bf16_1x1``): the
  weight-gradient kernel also holds its scratchpad, computed as oneDNN's ``init_conf``/``balance``/
  ``init_scratchpad`` do (:func:`bf16_weight_grad_scratchpad`): float32 weight+bias accumulators,
  one per thread splitting the minibatch (``nthr_mb``), transposed input rows
  (``tr_iw * 16 * ih`` per input block, not for first layers) and grad_output rows
  (``round2(ow) * 16 * oh`` per output block), page-aligned barrier contexts (8 KiB each), 128
  bytes of slack per piece. Exact (to the byte) on 19 shapes with 1 and 2 threads, e.g.
  Conv2d(3, 64, 8, stride 8) on 4x3x64x64: 66,180 B (1 thread), 74,372 B (2);
  Conv2d(16, 32, 3) on 16x16: 48,900 / 89,220 B; Conv2d(256, 256, 3, padding 1) on 4x4: 2.39 MB.
  It coexists with the blocked grad_output, input and weight gradient. Strided 1x1 convolutions
  hold ~25-33 KiB more (not modelled). float16 (no AVX512-FP16 here) and bfloat16 below AVX-512
  do not run in oneDNN (PyTorch's native kernels; not modelled); the forward pass has no extra
  bfloat16 scratch (its first-layer weight is padded to an even channel count, ~8 KiB, ignored).
- bfloat16 matrix products, AVX-512 without bfloat16 instructions (oneDNN ``gemm:jit:bf16``, the
  implementation ``ONEDNN_VERBOSE=1`` names): above 16*16*16 multiply-adds (``batch*M*K*N``, PyTorch's
  ``checksize``/``mkldnn_gemm``) PyTorch hands ``mm``/``addmm``/``bmm``/``baddbmm`` to oneDNN, which
  computes into a float32 accumulator in its scratchpad and converts it into the bfloat16 result
  (:func:`bf16_matmul_accumulator`, oneDNN's ``gemm_based::get_scratchpad_num_elements``): the
  ``batch*M*N`` outputs split over ``cpu_threads()`` threads, each thread's block at most one
  ``M*N`` matrix and rounded down to whole rows (up to 64 floats), at least one thread's worth, plus
  128 bytes, held while the result exists. Exact (to the byte) on 32 shapes with 1 and 2 threads
  (M, N, K multiples of 16 and not, transposed operands, batches 7-64), e.g. 260x64 @ 64x128 (HF
  ViT's MLP backward): 133,248 B; bmm 16 x (65x16 @ 16x65): 17,280 B (1 thread), 34,432 B (2).
  float16 (no AVX512-FP16 here) and bfloat16 below AVX-512 (``ONEDNN_MAX_CPU_ISA=AVX2
  ATEN_CPU_CAPABILITY=avx2``) run in PyTorch's own kernels, without it; CPUs with ``avx512_bf16``
  or AMX pick oneDNN's ``brgemm`` kernels, whose buffers are not modelled.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from typing import Any

import torch

from estimator.peak.kernels.cpu.isa import block_size, cpu_threads

__all__ = ["bf16_matmul_accumulator", "bf16_weight_grad_scratchpad", "onednn_bf16", "onednn_bf16_gemm"]


_MKLDNN_GEMM_MIN = 16 * 16 * 16  # PyTorch hands a bfloat16 product to oneDNN above this many MACs


def bf16_matmul_accumulator(a: Any, b: Any, out: Any) -> int:
    """The float32 accumulator of oneDNN's ``gemm:jit:bf16`` matmul (AVX-512 without bfloat16
    instructions), which computes a bfloat16 product in float32 and converts it into the result:
    oneDNN's ``gemm_based::get_scratchpad_num_elements`` floats, booked with 128 bytes of slack."""
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and isinstance(out, torch.Tensor)):
        return 0
    if not (a.dtype == b.dtype == out.dtype == torch.bfloat16 and a.device.type == "cpu") or a.dim() != b.dim():
        return 0
    if a.dim() not in (2, 3) or out.numel() == 0 or a.numel() == 0 or not onednn_bf16_gemm():
        return 0
    batch = a.shape[0] if a.dim() == 3 else 1
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    if batch * m * k * n <= _MKLDNN_GEMM_MIN:  # PyTorch's own kernel (``checksize``/``mkldnn_gemm``)
        return 0
    threads = cpu_threads()

    def block(nthr: int) -> int:  # get_scratchpad_block_elements, parallel over (batch, M, N)
        per_thread = -(-batch * m * n // nthr)
        size = min(m * n, per_thread // n * n) if per_thread >= n else per_thread
        return _round_up(size, 64)

    return max(block(1), threads * block(threads)) * 4 + _SCRATCHPAD_ALIGN


@functools.cache
def onednn_bf16_gemm() -> bool:
    """Whether oneDNN runs bfloat16 matmuls with ``gemm:jit:bf16`` here: AVX-512 without the
    bfloat16 instructions (``avx512_bf16``, AMX), which select ``brgemm`` kernels instead."""
    if not onednn_bf16():
        return False
    isa = (os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA") or "").upper()
    if isa in ("AVX512_CORE", "AVX512_CORE_VNNI"):
        return True
    return not (torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())


_SCRATCHPAD_ALIGN = 128  # oneDNN books each scratchpad piece with this much slack
_BARRIER = 2 * 4096  # a page-aligned barrier context (4096 bytes) and its alignment slack


@functools.cache
def onednn_bf16() -> bool:
    """Whether PyTorch runs bfloat16 convolutions in oneDNN here (AVX-512 and up)."""
    return block_size() == 16 and bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def bf16_weight_grad_scratchpad(
    grad_out: torch.Tensor,
    x: torch.Tensor,
    w: torch.Tensor,
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    groups: int,
    mask: Sequence[bool],
) -> int:
    """The scratchpad of oneDNN's AVX-512 bfloat16 weight-gradient kernel (``jit_bf16`` and
    ``jit_bf16_1x1``, oneDNN 3.x ``init_conf``/``balance``/``init_scratchpad``), NCHW, ungrouped:
    float32 weight (and bias) accumulators, one per thread splitting the minibatch, transposed
    copies of the input and of grad_output rows, and barrier contexts."""
    if x.dtype != torch.bfloat16 or groups != 1 or not onednn_bf16() or len(stride) != x.dim() - 2:
        return 0
    nd = x.dim() - 2
    threads = cpu_threads()
    with_bias = bool(mask[2]) if len(mask) > 2 else False
    mb, ic, oc = x.shape[0], x.shape[1], w.shape[0]
    ins, outs, ks = list(x.shape[2:]), list(grad_out.shape[2:]), list(w.shape[2:])
    if all(k == 1 for k in ks) and not any(padding):
        # jit_bf16_1x1: float32 weight + bias accumulators per minibatch thread (+ a barrier)
        nthr_mb = min(threads, mb)
        acc = (_round_up(oc, 16) * _round_up(ic, 16) + (_round_up(oc, 16) if with_bias else 0)) * nthr_mb * 4
        return acc + _SCRATCHPAD_ALIGN + (_BARRIER if nthr_mb > 1 else 0)
    ones = [1] * (3 - nd)
    idd, ih, iw = ones + ins  # 1-D (Whisper's conv1/conv2) and 2-D as oneDNN sees them: 3-D with unit depth/height
    od, oh, ow = ones + outs
    kd, kh, kw = ones + ks
    t_pad, l_pad = (0, *padding)[-2], padding[-1]
    stride_h, stride_w = (1, *stride)[-2], stride[-1]
    dil_h, dil_w = (1, *dilation)[-2], dilation[-1]
    r_pad = max(0, (ow - 1) * stride_w + (kw - 1) * dil_w + 1 - (iw + l_pad))
    b_pad = max(0, (oh - 1) * stride_h + (kh - 1) * dil_h + 1 - (ih + t_pad))
    first = ic < 16
    if not first:
        ic, oc = _round_up(ic, 16), _round_up(oc, 16)
    ic_block = ic if first else 16
    nb_ic, nb_oc = -(-ic // ic_block), -(-oc // 16)
    step = 0 if first else (8 if kw <= 3 else 4 if kw < 7 else 2 if kw <= 12 else 1)
    permw = not first and stride_w == 1 and dil_w == 1 and nd == 3 and kw == 1 and step > 4
    transpose_src, transpose_dst = not first and not permw, not permw
    spatial_blocking = (
        first and oc * od * oh * ow >= _l2_floats() and (ow >= 124 and oh > 1 if nd == 2 else ow * oh >= 64 * 124 and od > 1)
    )
    tr_pad = _round_up(max(l_pad, r_pad + 1), 2)
    tr_iw = _round_up(-(-iw // stride_w) + tr_pad, 2) * stride_w if transpose_src else iw
    tr_ow = _round_up(ow, 2) if transpose_dst else ow
    full_spatial = (
        nd == 2 and ih == oh and iw == ow and kh != 1 and kw != 1 and stride_h == stride_w == 1
        and dil_h == dil_w == 1 and l_pad == kw // 2 and t_pad == kh // 2 and not permw and not first
        and (16 * tr_iw * 2 + 16 * tr_ow * 2) * max(1, b_pad, t_pad) <= 48 * 1024 and ic >= 128
    )  # fmt: skip
    mb_work = mb * od if nd == 3 else mb if full_spatial else mb * oh
    dims = dict(mb=mb, ic=ic, oc=oc, ic_block=ic_block, nb_ic=nb_ic, nb_oc=nb_oc, id=idd, ih=ih, od=od, oh=oh)
    strides = stride_h * stride_w * (stride[0] if nd == 3 else 1)
    nthr, nthr_mb, nthr_oc_b, nthr_ic_b = _bf16_balance(threads, mb_work, tr_iw, tr_ow, kd * kh * kw, strides, dims)
    global_transpose = not spatial_blocking
    total = 0

    def book(nbytes: int, align: int = _SCRATCHPAD_ALIGN) -> None:
        nonlocal total
        total += nbytes + align if nbytes else 0

    if not permw:
        tr_src = tr_iw * ic_block * ih * idd * (nthr_mb * nb_ic if global_transpose else nthr) if transpose_src else 0
        book((tr_src + tr_pad) * 2)
        if global_transpose and nthr_oc_b > 1:
            book(_BARRIER // 2 * (nthr // nthr_oc_b), _BARRIER // 2)
        tr_dst = tr_ow * 16 * oh * od * (nthr_mb * nb_oc if global_transpose else nthr) if transpose_dst else 0
        book(tr_dst * 2)
        if global_transpose and nthr_ic_b > 1:
            book(_BARRIER // 2 * (nthr // nthr_ic_b), _BARRIER // 2)
    weights = nb_oc * 16 * nb_ic * ic_block * kd * kh * kw
    book((weights + (nb_oc * 16 if with_bias else 0)) * nthr_mb * 4)  # bfloat16 weight and bias grads
    if global_transpose:
        book(_BARRIER // 2, _BARRIER // 2)
    return total


def _bf16_balance(threads: int, mb_work: int, tr_iw: int, tr_ow: int, taps: int, strides: int, j: dict[str, int]) -> tuple[int, ...]:
    """oneDNN's ``balance`` of the bfloat16 weight-gradient kernel (float32 arithmetic as there)."""
    import numpy as np

    f = np.float32
    src = j["mb"] * j["ic"] * j["id"] * j["ih"] * tr_iw * 2
    dst = j["mb"] * j["oc"] * j["od"] * j["oh"] * tr_ow * 2
    wei = j["oc"] * j["ic"] * taps * 4
    scale = f(0.5) * f(dst + src) / f(wei)
    ratio = f(j["nb_oc"]) / f(j["nb_ic"])
    src_coef = max(f(1) / ratio, f(1)) * (f(4) if scale < f(1) else f(1))
    dst_coef, wei_coef = max(ratio, f(1)), max(scale, f(1))

    def cost(n_mb: int, n_oc: int, n_ic: int) -> np.float32:
        up = lambda a, b: -(-a // b)  # noqa: E731
        src_v = src_coef * f(up(mb_work, n_mb) * up(j["nb_ic"], n_ic) * j["mb"] * j["ic_block"] * j["id"] * j["ih"] * tr_iw) / f(mb_work * strides)
        wei_v = wei_coef * f(up(j["nb_oc"], n_oc) * up(j["nb_ic"], n_ic) * taps * j["ic_block"] * 16)
        dst_v = dst_coef * f(up(mb_work, n_mb) * up(j["nb_oc"], n_oc) * j["mb"] * 16 * j["od"] * j["oh"] * tr_ow) / f(mb_work)
        return f(f(src_v + dst_v) + wei_v)

    best, b_mb, b_oc, b_ic = cost(1, 1, 1), 1, 1, 1
    for n_mb in range(1, min(threads, mb_work) + 1):
        par = threads // n_mb
        for n_oc in range(1, min(par, j["nb_oc"]) + 1):
            n_ic = min(par // n_oc, j["nb_ic"])
            c = cost(n_mb, n_oc, n_ic)
            if c <= best:
                best, b_mb, b_oc, b_ic = c, n_mb, n_oc, n_ic
    if threads / 2 < b_mb < threads:
        b_mb = min(mb_work, threads)
    return b_mb * b_oc * b_ic, b_mb, b_oc, b_ic


@functools.cache
def _l2_floats() -> int:
    """oneDNN's per-core L2 size in floats (used to pick spatial blocking for large first layers)."""
    try:
        text = open("/sys/devices/system/cpu/cpu0/cache/index2/size").read().strip()  # noqa: SIM115
        size = int(text.rstrip("KMG")) * {"K": 1024, "M": 1 << 20, "G": 1 << 30}.get(text[-1], 1)
    except (OSError, ValueError):
        size = 1 << 20
    return size // 4


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m
