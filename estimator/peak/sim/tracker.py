"""Follow every tensor storage from allocation to free and record the peak of live bytes.

``StorageTracker`` is a ``TorchDispatchMode`` meant to run *inside* a ``FakeTensorMode``: every
aten op the model runs is seen once, after autograd, with fake tensors that carry shapes, dtypes
and storages but no data. Each output whose untyped storage has not been seen before is a new
allocation of ``storage.nbytes()`` bytes; a weak reference on the (preserved) Python storage
object tells when the last tensor or autograd node holding it is gone, i.e. when the allocator
would free it. Views and in-place ops share a storage that is already known, so they cost nothing,
exactly as on a real device.

The bookkeeping is deliberately small for speed (an 8B model's training step is tens of thousands
of ops): one dict lookup per output, an integer clock, and no stack walking. Classification is
done afterwards: every storage remembers when it was allocated and freed on the clock and carries
a mutable ``component``; the caller relabels storages once it knows what they became (the
gradients after backward, the optimizer states after a step, the KV cache after prefill), and the
breakdown at the peak instant is computed from the storages alive at that clock tick.

Kernels that allocate buffers no aten op returns (oneDNN's blocked copies, BLAS operand copies)
are described by a :data:`WorkspaceModel` (the CPU one is :mod:`estimator.peak.kernels.cpu.workspace`): for
each op it gives a :class:`KernelScratch`, counted as a transient on top of the live bytes just
before the op's outputs are allocated and again while they exist.

This is the same method as PyTorch's private ``torch.distributed._tools.mem_tracker.MemTracker``
(storage weak references), without its per-module stack and per-op snapshots.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode, is_traceable_wrapper_subclass
from torch.utils._pytree import tree_leaves

from estimator.options import Component
from estimator.peak.fakes.shims import OVERRIDES
from estimator.peak.kernels.scratch import WorkspaceModel

__all__ = ["StorageRecord", "StorageTracker"]


logger = logging.getLogger(__name__)

# Ops that can change the size of an existing storage (``out=`` resizes, ``set_``).
_RESIZING_OPS = frozenset(
    {
        torch.ops.aten.resize_.default,
        torch.ops.aten.set_.source_Storage,
        torch.ops.aten.set_.source_Storage_storage_offset,
    }
)


class StorageRecord:
    """One tensor storage: size, lifetime on the tracker's clock, and what it holds."""

    __slots__ = ("__weakref__", "component", "nbytes", "t_alloc", "t_free")

    def __init__(self, nbytes: int, t_alloc: int, component: Component) -> None:
        self.nbytes = nbytes
        self.t_alloc = t_alloc
        self.t_free: int | None = None
        self.component = component

    def alive_at(self, t: int) -> bool:
        return self.t_alloc <= t and (self.t_free is None or self.t_free > t)


@dataclass(frozen=True)
class PeakSnapshot:
    """The peak of live bytes within a window and what held it at that instant."""

    peak_bytes: int
    components: dict[str, int]


class StorageTracker(TorchDispatchMode):
    """Dispatch mode that tracks live storage bytes; see the module docstring."""

    def __init__(self, workspace: WorkspaceModel | None = None, kernels: dict[Any, Callable[..., Any]] | None = None) -> None:
        super().__init__()
        self._workspace = workspace
        self._kernels = kernels or {}
        self._records: dict[int, StorageRecord] = {}  # live storages, keyed by StorageImpl address
        self._all: list[StorageRecord] = []
        self._refs: dict[int, weakref.ref[Any]] = {}
        self._clock = 0
        self.live_bytes = 0
        self.peak_bytes = 0
        self._peak_clock = 0
        self.new_component = Component.TEMPORARIES
        # The step's phase (``"prefill"``, ``"decode"``, ``"train_forward"``, ...; None between phases), set by
        # :mod:`estimator.peak.steps`, and an observer of every op it sees: ``on_op(phase, func, args, kwargs, out)``
        # (the per-op cost counter, :mod:`estimator.speed.trace`)
        self.phase: str | None = None
        self.on_op: Callable[[str | None, Any, tuple[Any, ...], dict[str, Any], Any], None] | None = None

    # -- registration -------------------------------------------------------------------------
    def register(self, tensor: torch.Tensor, component: Component) -> None:
        """Track a tensor that already exists (weights, inputs) or relabel a tracked one; a tensor subclass that
        wraps others (torchao's quantized weights) is the tensors it holds."""
        if is_traceable_wrapper_subclass(tensor) and not hasattr(tensor, "_local_tensor"):  # a DTensor: see _see
            for name in tensor.__tensor_flatten__()[0]:
                inner = getattr(tensor, name)
                if isinstance(inner, torch.Tensor):
                    self.register(inner, component)
            return
        rec = self._see(tensor, component)
        if rec is not None:
            rec.component = component

    def relabel(self, tensors: Iterable[torch.Tensor], component: Component) -> None:
        """Say what already tracked storages hold (e.g. ``p.grad`` after backward)."""
        for t in tensors:
            self.register(t, component)

    def _see(self, t: torch.Tensor, component: Component) -> StorageRecord | None:
        t = getattr(t, "_local_tensor", t)  # a DTensor (FSDP2, tensor parallel): the rank's own storage
        try:
            st = t.untyped_storage()
        except (NotImplementedError, RuntimeError):  # sparse, nested, ...: not modelled
            return None
        key = st._cdata
        rec = self._records.get(key)
        if rec is not None:
            return rec
        nbytes = st.nbytes()
        self._clock += 1
        rec = StorageRecord(nbytes, self._clock, component)
        self._records[key] = rec
        self._all.append(rec)
        self._refs[key] = weakref.ref(st, partial(self._on_collect, key))
        self.live_bytes += nbytes
        if self.live_bytes > self.peak_bytes:
            self.peak_bytes = self.live_bytes
            self._peak_clock = self._clock
        return rec

    def _on_collect(self, key: int, _ref: object) -> None:
        self._free(key)

    def _free(self, key: int) -> None:
        rec = self._records.pop(key, None)
        self._refs.pop(key, None)
        if rec is None:
            return
        self._clock += 1
        rec.t_free = self._clock
        self.live_bytes -= rec.nbytes

    # -- dispatch -----------------------------------------------------------------------------
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kernel = self._kernels.get(func)
        if kernel is not None:  # a device's kernel written in Python: its own ops are tracked
            with self:
                return kernel(*args, **(kwargs or {}))
        override = OVERRIDES.get(func)
        out = func(*args, **(kwargs or {})) if override is None else override(func, args, kwargs or {})
        scratch = None if self._workspace is None else self._workspace(func, args, out)
        if scratch is not None and scratch.before_outputs:
            self._transient(scratch.before_outputs)
        component = self.new_component
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self._see(t, component)
        if func in _RESIZING_OPS:
            self._resync(args[0])
        if scratch is not None and scratch.with_outputs:
            self._transient(scratch.with_outputs)
        if self.on_op is not None:
            self.on_op(self.phase, func, args, kwargs or {}, out)
        return out

    def _transient(self, nbytes: int) -> None:
        """A kernel-internal buffer, allocated after the op's outputs and freed before it returns."""
        self._clock += 1
        rec = StorageRecord(nbytes, self._clock, Component.TEMPORARIES)
        self._all.append(rec)
        if self.live_bytes + nbytes > self.peak_bytes:
            self.peak_bytes = self.live_bytes + nbytes
            self._peak_clock = self._clock
        self._clock += 1
        rec.t_free = self._clock

    def _resync(self, t: Any) -> None:
        if not isinstance(t, torch.Tensor):
            return
        st = t.untyped_storage()
        rec = self._records.get(st._cdata)
        if rec is not None and rec.nbytes != st.nbytes():
            # Model a resize as a free of the old block and an allocation of the new one.
            self.live_bytes += st.nbytes() - rec.nbytes
            rec.nbytes = st.nbytes()
            self._clock += 1
            if self.live_bytes > self.peak_bytes:
                self.peak_bytes = self.live_bytes
                self._peak_clock = self._clock

    def storage_resized(self, st: Any) -> None:
        """An untyped storage was resized in place (``UntypedStorage.resize_``, which no dispatch mode
        sees; FSDP2 frees and re-allocates its unsharded parameters so): the old block is freed and
        a block of the new size, labelled ``new_component``, allocated."""
        rec = self._records.get(st._cdata)
        if rec is None or rec.nbytes == st.nbytes():
            return
        self._clock += 1
        rec.t_free = self._clock
        self.live_bytes -= rec.nbytes
        self._clock += 1
        new = StorageRecord(st.nbytes(), self._clock, self.new_component)
        self._records[st._cdata] = new
        self._all.append(new)
        self.live_bytes += new.nbytes
        if self.live_bytes > self.peak_bytes:
            self.peak_bytes = self.live_bytes
            self._peak_clock = self._clock

    # -- results ------------------------------------------------------------------------------
    @property
    def clock(self) -> int:
        return self._clock

    def events(self) -> list[tuple[int, int]]:
        """Every allocation and free in clock order, as :func:`~estimator.peak.kernels.cuda.allocator.replay`
        takes them: ``(record index, nbytes)`` for an allocation, ``(record index, -1)`` for its free."""
        timeline: list[tuple[int, int, int]] = []
        for i, rec in enumerate(self._all):
            timeline.append((rec.t_alloc, i, rec.nbytes))
            if rec.t_free is not None:
                timeline.append((rec.t_free, i, -1))
        timeline.sort()
        return [(i, nbytes) for _, i, nbytes in timeline]

    def labels(self) -> list[str]:
        """What each record of :meth:`events` holds now (its component, by record index)."""
        return [rec.component.value for rec in self._all]

    def records_of(self, tensors: Iterable[torch.Tensor]) -> list[StorageRecord]:
        """The live records behind ``tensors`` (to ask later what if they had lived longer)."""
        found = {}
        for t in tensors:
            t = getattr(t, "_local_tensor", t)
            try:
                rec = self._records.get(t.untyped_storage()._cdata)
            except (NotImplementedError, RuntimeError):
                continue
            if rec is not None:
                found[id(rec)] = rec
        return list(found.values())

    def snapshot_if_kept(self, kept: Iterable[StorageRecord], since: int, until: int, kept_until: int) -> PeakSnapshot:
        """The peak of the window ``[since, until]`` of the clock had the ``kept`` storages stayed
        alive until ``kept_until`` (a loop that holds a reference longer), with its breakdown."""
        extended = {id(rec) for rec in kept}

        def freed(rec: StorageRecord) -> int | None:
            if id(rec) in extended and rec.t_free is not None and rec.t_free < kept_until:
                return kept_until
            return rec.t_free

        deltas: dict[int, int] = {}
        live = 0
        for rec in self._all:
            end = freed(rec)
            if rec.t_alloc <= since and (end is None or end > since):
                live += rec.nbytes
            elif since < rec.t_alloc <= until:
                deltas[rec.t_alloc] = deltas.get(rec.t_alloc, 0) + rec.nbytes
            if end is not None and since < end <= until and rec.t_alloc <= until:
                deltas[end] = deltas.get(end, 0) - rec.nbytes
        peak, peak_t = live, since
        for t in sorted(deltas):
            live += deltas[t]
            if live > peak:
                peak, peak_t = live, t
        return PeakSnapshot(peak, {k: v for k, v in self._breakdown(peak_t, freed).items() if v})

    def peak_excluding(self, excluded: Iterable[Component], since: int = 0, until: int | None = None) -> PeakSnapshot:
        """The peak within ``[since, until]`` of the clock had the storages of the ``excluded``
        components taken no memory (what a rank holds besides the model states a parallel strategy
        partitions), with its breakdown at that instant."""
        skip = set(excluded)
        end = self._clock if until is None else until
        deltas: dict[int, int] = {}
        live = 0
        for rec in self._all:
            if rec.component in skip or rec.t_alloc > end:
                continue
            if rec.t_alloc <= since:
                if rec.t_free is None or rec.t_free > since:
                    live += rec.nbytes
            else:
                deltas[rec.t_alloc] = deltas.get(rec.t_alloc, 0) + rec.nbytes
            if rec.t_free is not None and since < rec.t_free <= end:
                deltas[rec.t_free] = deltas.get(rec.t_free, 0) - rec.nbytes
        peak, peak_t = live, since
        for t in sorted(deltas):
            live += deltas[t]
            if live > peak:
                peak, peak_t = live, t
        comps = {k: v for k, v in self._breakdown(peak_t, lambda rec: rec.t_free).items()
                 if v and k not in {c.value for c in skip}}
        return PeakSnapshot(sum(comps.values()), comps)

    def _breakdown(self, t: int, freed: Callable[[StorageRecord], int | None]) -> dict[str, int]:
        """Bytes per component of the storages alive at clock ``t`` (freed at ``freed(record)``)."""
        comps: dict[str, int] = {}
        for rec in self._all:
            end = freed(rec)
            if rec.t_alloc <= t and (end is None or end > t):
                comps[rec.component.value] = comps.get(rec.component.value, 0) + rec.nbytes
        return comps

    def reset_peak(self) -> None:
        """Start a new window: the peak so far becomes the bytes live now."""
        self.peak_bytes = self.live_bytes
        self._peak_clock = self._clock

    def snapshot(self) -> PeakSnapshot:
        """The peak of the current window with its breakdown at that instant."""
        comps = self._breakdown(self._peak_clock, lambda rec: rec.t_free)
        total = sum(comps.values())
        if total != self.peak_bytes:  # a resize moved bytes without a record: keep the sum exact
            logger.debug("peak %d != sum of live records %d", self.peak_bytes, total)
            comps[Component.TEMPORARIES.value] = (
                comps.get(Component.TEMPORARIES.value, 0) + self.peak_bytes - total
            )
        return PeakSnapshot(self.peak_bytes, {k: v for k, v in comps.items() if v})
