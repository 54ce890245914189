"""The per-thread buffers of PyTorch's CPU flash attention kernel (``scaled_dot_product_attention`` on CPU).

``aten/src/ATen/native/cpu/FlashAttentionKernel.cpp``: ``flash_attention_kernel_impl`` picks the
query block by the query length (256 from 768 queries, 64 from 192, else 32; key/value blocks of
512), each clipped to the sequence, and ``cpu_flash_attention`` allocates, after the output and
the log-sum-exp, one buffer per thread of the accumulate type::

    size_per_thread = qSplitSize * kvSplitSize   # qk
                    + qSplitSize + qSplitSize    # qk_max, qk_sum
                    + qSplitSize * headSize_v    # dst
    buf = at::empty({num_thread, size_per_thread}, accumulate_dtype)
    buf_reduced = at::empty({num_thread, qSplitSize, is_reduced_type ? kvSplitSize : 0})

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

from typing import Any

import torch

from estimator.peak.kernels.cpu.isa import cpu_threads
from estimator.peak.kernels.scratch import KernelScratch

__all__ = ["FLASH_CPU", "FLASH_CPU_BACKWARD", "SAFE_SOFTMAX", "flash_attention_backward_scratch", "flash_attention_scratch",
           "safe_softmax_scratch"]

FLASH_CPU = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default
FLASH_CPU_BACKWARD = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward.default
SAFE_SOFTMAX = torch.ops.aten._safe_softmax.default
_KV_SPLIT = 512


def _q_split(q_len: int) -> int:
    return 256 if q_len >= 768 else 64 if q_len >= 192 else 32


def flash_attention_scratch(args: tuple[Any, ...]) -> KernelScratch:
    """The kernel's per-thread buffers for ``(query, key, value, ...)`` of shape (B, heads, L, head_dim)."""
    query, key, value = args[0], args[1], args[2]
    q_len, kv_len, head_v = query.shape[2], key.shape[2], value.shape[3]
    q_split = min(_q_split(q_len), q_len)
    kv_split = min(_KV_SPLIT, kv_len)
    threads = cpu_threads()
    reduced = query.dtype in (torch.float16, torch.bfloat16)
    accumulate = 4 if reduced or query.dtype == torch.float32 else query.element_size()
    per_thread = q_split * kv_split + 2 * q_split + q_split * head_v
    buf = threads * per_thread * accumulate
    buf_reduced = threads * 2 * q_split * kv_split * query.element_size() if reduced else 0  # attn and grad_attn, reduced
    return KernelScratch(with_outputs=buf + buf_reduced)


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
