"""Kernel-internal buffers that fake tensors cannot see, modelled where measured.

A fake tensor only knows an op's outputs; some real kernels allocate more, through the same
allocator, and free it before returning. Those buffers count in the allocator's peak.

CPU (measured with ``torch.profiler`` on torch 2.14, oneDNN convolution):

- ``aten.convolution`` forward, 4-D float input, ``groups == 1``: oneDNN reorders the weight and
  the input into its blocked layouts, i.e. a transient buffer of ``weight.nbytes + input.nbytes``
  allocated after the output (a 512x512x3x3 fp32 conv briefly holds an extra 9 MiB).

Not modelled (said in the result's notes): the backward convolution's workspaces on CPU, which
depend on oneDNN's algorithm choice (up to ~2 input-sized buffers for dense convolutions, more
for depthwise ones), and every CUDA workspace (cuDNN, cuBLAS), which belongs to the CUDA runtime
accounting, outside ``peak_bytes``.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["cpu_workspace"]

_CONV = torch.ops.aten.convolution.default


def cpu_workspace(func: Any, args: tuple[Any, ...], out: Any) -> int:
    """Bytes of the transient buffer a CPU kernel allocates inside ``func``; 0 if none."""
    if func is not _CONV:
        return 0
    x, w = args[0], args[1]
    transposed, groups = args[6], args[8]
    if x.dim() != 4 or transposed or groups != 1 or not x.is_floating_point():
        return 0
    return int(w.numel() * w.element_size() + x.numel() * x.element_size())
