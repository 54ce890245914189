"""The contract between the storage tracker (:mod:`estimator.peak.sim.tracker`) and the kernel models: what a kernel
holds internally, invisible to fakes (:class:`KernelScratch`), and the signature of a model that says it (:data:`WorkspaceModel`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["KernelScratch", "WorkspaceModel"]


@dataclass(frozen=True)
class KernelScratch:
    """Bytes a kernel allocates internally, invisible to fakes, at its two high points: before its
    outputs are allocated, and while they exist (both freed before the kernel returns)."""

    before_outputs: int = 0
    with_outputs: int = 0


# (op, args, outputs) -> the kernel's hidden buffers, or None.
WorkspaceModel = Callable[[Any, tuple[Any, ...], Any], "KernelScratch | None"]
