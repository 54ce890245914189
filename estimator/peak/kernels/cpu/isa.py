"""The CPU facts the kernel-scratch models depend on: oneDNN's channel block (read once per
process) and the thread count of the CPU run being simulated (an input: :func:`target_threads`)."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator

import torch

__all__ = ["block_size", "cpu_threads", "target_threads"]

_threads: int | None = None  # the simulated run's threads; None: this process's own


@functools.cache
def block_size() -> int:
    """oneDNN's channel block on this CPU: 16 with AVX-512, 8 with AVX2 or less."""
    return 16 if torch.backends.cpu.get_cpu_capability().startswith("AVX512") else 8


def cpu_threads() -> int:
    """The threads of the CPU run being simulated, which size the kernels' per-thread scratch: the
    count :func:`target_threads` set (``HardwareSpec.cpu_threads``), else this process's
    ``torch.get_num_threads()``. A module value, not a context variable, so that autograd's
    threads see it too; simulations run one at a time (``estimator.peak.rows.simulation_lock``)."""
    return _threads if _threads is not None else torch.get_num_threads()


@contextlib.contextmanager
def target_threads(threads: int | None) -> Iterator[None]:
    """Simulate a CPU run of ``threads`` threads meanwhile (``None``: this process's own count)."""
    global _threads
    before, _threads = _threads, threads
    try:
        yield
    finally:
        _threads = before
