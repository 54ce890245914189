"""The scratchpad of oneDNN's gemm weight-gradient kernel for wide first-layer convolutions (a ViT's patchifier).

Measured with ``torch.profiler``'s memory events on torch 2.14 (x86-64, AVX-512 and
``ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2``, float32), calling
``aten.convolution_backward`` with only the weight gradient asked (``output_mask = (False, True,
False)``: a first layer, its input the pixels) on NCHW input, 1 and 3 input channels, 64 and 128
output channels, kernels 4-32 with stride 7-32, batch 1-4, images 64-512 pixels, 1-3 threads.
Kernels at most 14 wide with AVX-512 (4, 7, 8, 14; and 16 high x 8 wide), at most 13 with AVX2 (8-13),
run in the jit kernel with small scratch (:mod:`estimator.peak.kernels.cpu.workspace`); wider ones (AVX-512: 15, 16,
20, 32; AVX2: 14 too; the patch embedding of CLIP, SigLIP and ViT at 14, 16 or 32 pixels) fall back
to ``gemm``, whose scratchpad is, per thread,
the im2col columns ``C_in * kh * kw * oh * ow`` floats and a weight-reduction buffer of 4 times the
weight's bytes, plus 256 bytes (two pieces of 128 bytes of slack); all threads take part when
``oh * ow / threads < 256`` and the batch is above 1 (oneDNN's ``gemm_convolution_utils::init_conf``),
else one. It is held while the weight gradient (the output) exists, freed before the kernel returns.
Exact to the byte on every gemm-path shape measured (both ISAs), e.g. Conv2d(3, 64, 16, stride 16) on 2x3x96x96, 2 threads:
1,794,304 B (3 threads: 2,691,328 B; batch 1: 897,280 B; 512-pixel images: 3,932,416 B, one thread).

Not modelled: the same kernel with a grad input asked, 16 or more input channels, channels-last
input, 3-d convolutions, bfloat16, and CPUs below AVX2.
"""

from __future__ import annotations

from typing import Any

import torch

from estimator.peak.kernels.cpu.isa import block_size, cpu_threads

__all__ = ["wide_patch_weight_grad_scratch"]

# the widest kernel oneDNN's jit weight-gradient kernel takes, by channel block (AVX-512: 14 jit, 15 gemm; AVX2: 13 jit, 14 gemm)
_JIT_MAX_KW = {16: 14, 8: 13}
_FIRST_LAYER_CHANNELS = 16  # below this many input channels oneDNN reads the input as it is (a first layer)
_SLACK = 2 * 128
_ALL_THREADS_BELOW = 256  # output positions per thread under which every thread takes a share


def wide_patch_weight_grad_scratch(args: tuple[Any, ...]) -> int:
    """Bytes of the gemm scratchpad for ``aten.convolution_backward`` ``args`` (see the module docstring); 0 if it does not apply."""
    grad_out, x, w = args[0], args[1], args[2]
    groups, mask = args[9], args[10]
    if not (isinstance(x, torch.Tensor) and x.dim() == 4 and x.dtype == torch.float32):
        return 0
    if mask[0] or not mask[1] or groups != 1 or w.shape[1] >= _FIRST_LAYER_CHANNELS or w.shape[-1] <= _JIT_MAX_KW[block_size()]:
        return 0
    if x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous():
        return 0
    positions = int(grad_out.shape[2]) * int(grad_out.shape[3])
    threads = cpu_threads()
    workers = threads if positions / threads < _ALL_THREADS_BELOW and x.shape[0] > 1 else 1
    columns = int(w.shape[1]) * int(w.shape[2]) * int(w.shape[3]) * positions * 4
    return workers * (4 * w.numel() * 4 + columns) + _SLACK
