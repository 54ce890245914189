"""The per-thread buffers of PyTorch's CPU flash attention kernel (``scaled_dot_product_attention`` on CPU).

``aten/src/ATen/native/cpu/FlashAttentionKernel.cpp`` (torch 2.14): ``flash_attention_kernel_impl`` picks the
query block by the query length (256 from 768 queries, 64 from 192, else 32; key/value blocks of
512), each clipped to the sequence, and ``cpu_flash_attention`` allocates, after the output and
the log-sum-exp, one buffer per thread of the accumulate type and, for bfloat16 / float16, one of the
input type for the block's probabilities::

    size_per_thread = qSplitSize * kvSplitSize   # qk
                    + qSplitSize + qSplitSize    # qk_max, qk_sum
                    + qSplitSize * headSize      # dst
    buf = at::empty({num_thread, size_per_thread}, accumulate_dtype)
    buf_reduced = at::empty({num_thread, qSplitSize, is_reduced_type ? ekvSplitSize : 0})

Where oneDNN can pack the operand (``cpublas::could_pack``: bfloat16 on a CPU whose oneDNN ISA reaches
``avx512_core_amx``, float16 with ``avx512_core_amx_fp16``, oneDNN enabled) the kernel is instantiated
``with_pack`` and packs K and V in VNNI layout when the shapes pay for it (``need_pack``: query and key
lengths at least 64 for bfloat16 / 16 for float16, and ``gemm_size_per_thread / pack_size`` at least 4 /
1, with ``pack_size = B * kv_heads * kvSize * headSize`` and ``gemm_size_per_thread = ceil(B * heads *
qSlice / num_thread) * qSplitSize * (is_causal ? min(qSize, kvSize) : kvSize) * headSize``); then it
also holds, to the end, ``key_t_reorder`` ``{B, kv_heads, eheadSize, kvSize}`` and ``value_t_reorder``
``{B, kv_heads, kv_padding_size, headSize}`` (odd sizes padded to even: ``eheadSize``,
``ekvSplitSize``, ``kv_padding_size = (kvSize - 1) / kvSplitSize * ekvSplitSize + ekvTail``), for an
odd head size a query padding ``{num_thread, qSplitSize, eheadSize}``, and, while K and V are
packed, a transpose buffer ``{num_thread, kvSplitSize, headSize}``, all of the input type.
Measured on torch 2.14's CPU allocator (AMX, 2 threads), bfloat16 2 x 4 heads x 64 x 16 with a mask:
20,992 + 8,192 + 16,384 + 16,384 + 4,096 bytes, the five allocations inside
``_scaled_dot_product_flash_attention_for_cpu``; float32 the first only.

freed when the kernel returns. At a few hundred tokens it is noise; at Whisper's 1,500 encoder
positions it is two 256 x 512 float blocks per thread (1,085,440 bytes on 2 threads, measured on the
allocator as one allocation inside ``_scaled_dot_product_flash_attention_for_cpu``), the peak of a
tiny Whisper's ``generate``. The backward (``cpu_flash_attention_backward``), with the same blocks,
allocates after its gradients (zeros) one buffer per thread for the block's attention and its gradient::

    buf = at::empty({num_thread, 2 * qSplitSize * kvSplitSize}, accumulate_dtype)
    buf_reduced = at::empty({num_thread, is_reduced_type ? 2 * qSplitSize * kvSplitSize : 0})  # attn, grad_attn

(a tiny AST's 302 positions, 2 threads: 309,248 bytes, measured as one allocation inside
``_scaled_dot_product_flash_attention_for_cpu_backward``).

Where the flash kernel cannot run (an attention mask that needs a gradient: SAM's relative-position bias in
training), ``_scaled_dot_product_attention_math`` runs, whose ``_safe_softmax`` (one op to the fakes) holds
beside its output a bool ``isneginf`` of its input and that mask's ``all`` over the softmax dim (one bool per row):
measured on torch 2.14's CPU allocator, Unlimited-OCR's global SAM layer on 4 tiles of 40x40 patches, 2 heads
(a 4x2x1600x1600 softmax): 20,492,800 bytes above the fakes' peak, 20,480,000 + 12,800.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import torch

from estimator.peak.kernels.cpu.isa import cpu_threads
from estimator.peak.kernels.scratch import KernelScratch

__all__ = ["FLASH_CPU", "FLASH_CPU_BACKWARD", "SAFE_SOFTMAX", "could_pack", "flash_attention_backward_scratch",
           "flash_attention_scratch", "safe_softmax_scratch"]

FLASH_CPU = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default
FLASH_CPU_BACKWARD = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward.default
SAFE_SOFTMAX = torch.ops.aten._safe_softmax.default
_KV_SPLIT = 512


def _q_split(q_len: int) -> int:
    return 256 if q_len >= 768 else 64 if q_len >= 192 else 32


@functools.cache
def could_pack(dtype: torch.dtype) -> bool:
    """``cpublas::could_pack(dtype)``: oneDNN enabled and its ISA at ``avx512_core_amx`` (bfloat16) or
    ``avx512_core_amx_fp16`` (float16) on this CPU, ``ONEDNN_MAX_CPU_ISA`` / ``DNNL_MAX_CPU_ISA`` below
    AMX turning it off as it turns off oneDNN's own dispatch."""
    if not torch.backends.mkldnn.enabled:
        return False
    isa = (os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA") or "").upper()
    if isa and "AMX" not in isa and isa != "ALL":
        return False
    if dtype == torch.bfloat16:
        return bool(torch.cpu._is_amx_tile_supported())
    if dtype == torch.float16:
        return bool(torch.cpu._is_amx_fp16_supported()) and isa != "AVX512_CORE_AMX"
    return False


def _even(n: int, pack: bool) -> int:
    return n + 1 if pack and n % 2 else n


def flash_attention_scratch(args: tuple[Any, ...]) -> KernelScratch:
    """The kernel's buffers for ``(query, key, value, dropout_p, is_causal, ...)`` of shape (B, heads, L,
    head_dim) (the key and value with their own, GQA, head count): see the module docstring."""
    query, key = args[0], args[1]
    is_causal = bool(args[4]) if len(args) > 4 else False
    batch, heads, q_len, head = query.shape
    kv_heads, kv_len = key.shape[1], key.shape[2]
    q_split = min(_q_split(q_len), q_len)
    kv_split = min(_KV_SPLIT, kv_len)
    threads = cpu_threads()
    element = query.element_size()
    reduced = query.dtype in (torch.float16, torch.bfloat16)
    accumulate = 4 if reduced or query.dtype == torch.float32 else element
    pack = False
    if reduced and could_pack(query.dtype):
        least = 64 if query.dtype == torch.bfloat16 else 16
        pack = kv_len >= least and q_len >= least
        if pack:
            q_slices = -(-q_len // q_split)
            per_thread = (batch * heads * q_slices + threads - 1) // threads
            gemm = per_thread * q_split * (min(q_len, kv_len) if is_causal else kv_len) * head
            pack = gemm / (batch * kv_heads * kv_len * head) >= (4 if query.dtype == torch.bfloat16 else 1)
    buf = threads * (q_split * kv_split + 2 * q_split + q_split * head) * accumulate
    buf_reduced = threads * q_split * _even(kv_split, pack) * element if reduced else 0
    if not pack:
        return KernelScratch(with_outputs=buf + buf_reduced)
    e_head = _even(head, True)
    kv_tail = (kv_len - 1) % kv_split + 1
    kv_padding = (kv_len - 1) // kv_split * _even(kv_split, True) + _even(kv_tail, True)
    reorder = batch * kv_heads * (e_head * kv_len + kv_padding * head) * element
    query_padding = threads * q_split * e_head * element if head % 2 else 0
    transpose = threads * kv_split * head * element  # freed once K and V are packed, the others held to the end
    return KernelScratch(with_outputs=buf + buf_reduced + reorder + query_padding + transpose)


def flash_attention_backward_scratch(args: tuple[Any, ...]) -> KernelScratch:
    """The backward kernel's per-thread buffers for ``(grad_out, query, key, value, ...)``."""
    query, key = args[1], args[2]
    q_split = min(_q_split(query.shape[2]), query.shape[2])
    kv_split = min(_KV_SPLIT, key.shape[2])
    threads = cpu_threads()
    reduced = query.dtype in (torch.float16, torch.bfloat16)
    accumulate = 4 if reduced or query.dtype == torch.float32 else query.element_size()
    buf = threads * 2 * q_split * kv_split * accumulate
    buf_reduced = threads * 2 * q_split * kv_split * query.element_size() if reduced else 0  # attn and grad_attn, reduced
    return KernelScratch(with_outputs=buf + buf_reduced)


def safe_softmax_scratch(args: tuple[Any, ...]) -> KernelScratch:
    """``_safe_softmax(self, dim)``'s masks beside its output: a bool per element and a bool per row along ``dim``."""
    x, dim = args[0], args[1]
    return KernelScratch(with_outputs=x.numel() + x.numel() // max(x.shape[dim], 1))
