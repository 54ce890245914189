"""The CPU facts the kernel-scratch models depend on (read once per process)."""

from __future__ import annotations

import functools

import torch

__all__ = ["block_size"]


@functools.cache
def block_size() -> int:
    """oneDNN's channel block on this CPU: 16 with AVX-512, 8 with AVX2 or less."""
    return 16 if torch.backends.cpu.get_cpu_capability().startswith("AVX512") else 8
