"""``MemTracker``: what a real run holds, call site by call site (after Pytorch-Memory-Utils).

Each :meth:`MemTracker.track` records, for the line that called it (file, line, function): the
tensors on the tracked device that appeared and disappeared since the previous call (grouped by
shape, dtype and type, with their sizes, as ``+``/``-`` lines), the memory in use now and the peak
since the previous call. The records are a DataFrame (:meth:`to_dataframe`, :meth:`changes`)
and, on request, a timestamped text log in the seed tool's format.

Where the numbers come from:

- **CUDA**: the caching allocator's statistics (``memory_allocated``, ``max_memory_allocated``
  reset at every call, ``memory_reserved``). They include what autograd holds for backward, much
  of which no scan of Python objects can see (tensors made inside C++ ops, such as
  ``max_pool2d``'s indices).
- **CPU**: PyTorch keeps no allocator statistics on CPU, so the tracker does its own accounting:
  a dispatch mode (the peak simulator's :class:`~estimator.peak.sim.tracker.StorageTracker`) sees
  every aten op's outputs while the tracker is active and follows each storage until it is freed,
  so tensors autograd saves are counted too. Tensors it did not see being made (created before
  the tracker, or without an aten op) are added when a ``track()`` first finds them. The records
  say ``accounting="dispatch"``; the accounting runs every op through Python, which is slow.

The appeared / disappeared lines come from a scan of the live Python tensor objects
(``gc.get_objects()``), as in the seed tool; "tensor bytes" sums their distinct storages. On CPU
the accounting's dispatch mode gives every op output a Python object, so the scan also lists what
autograd saves (``max_pool2d``'s indices); on CUDA it lists only tensors Python code made.
Nothing is printed; a log file is written only where ``log`` names one.
"""

from __future__ import annotations

import datetime as _dt
import gc
import inspect
import os
import weakref
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["MemTracker", "TensorChange", "TrackPoint"]

MiB = 1024**2


@dataclass(frozen=True)
class TensorChange:
    """``count`` tensors of one shape, dtype and type that appeared (``sign="+"``) or disappeared."""

    sign: str
    count: int
    shape: tuple[int, ...]
    dtype: str
    kind: str  # "Tensor" or "Parameter"
    nbytes: int  # all ``count`` tensors together

    def line(self) -> str:
        return (
            f"{self.sign} | {self.count} * Size:{self.shape!s:<20} | Memory: {self.nbytes / MiB:.4g} MiB"
            f" | {self.kind} | {self.dtype}"
        )


@dataclass(frozen=True)
class TrackPoint:
    """One ``track()`` call."""

    time: _dt.datetime
    file: str
    line: int
    function: str
    changes: tuple[TensorChange, ...]
    tensor_bytes: int  # distinct storages of the live tensors found on the device
    allocated_bytes: int  # allocator (CUDA) or dispatch accounting (CPU): in use now
    peak_bytes: int  # the highest ``allocated_bytes`` since the previous call
    reserved_bytes: int | None  # CUDA only: held by the caching allocator
    accounting: str  # "cuda-allocator" or "dispatch"

    def header(self) -> str:
        reserved = "" if self.reserved_bytes is None else f" Reserved:{self.reserved_bytes / MiB:<7.1f}MiB"
        return (
            f"At {os.path.basename(self.file)} line {self.line}: {self.function:<30}"
            f" Total Tensor Used Memory:{self.tensor_bytes / MiB:<7.1f}MiB"
            f" Allocated:{self.allocated_bytes / MiB:<7.1f}MiB Peak:{self.peak_bytes / MiB:<7.1f}MiB{reserved}"
        )


class MemTracker:
    """Track the tensors and memory of a real run; see the module docstring.

    ``device``: "cuda", "cuda:1", "cpu" or a ``torch.device`` (default: CUDA when available).
    ``log``: a file path, or an existing directory in which ``<timestamp>-mem_track.txt`` is made.
    Use it as a context manager (or call :meth:`close`) so the CPU accounting stops.
    """

    def __init__(self, device: str | torch.device | None = None, *, log: str | os.PathLike[str] | None = None) -> None:
        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        if self.device.type not in ("cuda", "cpu"):
            raise ValueError(f"MemTracker tracks cuda or cpu, not {self.device.type}")
        self.started = _dt.datetime.now()
        self.points: list[TrackPoint] = []
        self._known: dict[int, tuple[weakref.ref[torch.Tensor], tuple[tuple[int, ...], str, str, int]]] = {}
        self.log_path: Path | None = None
        if log is not None:
            path = Path(log)
            if path.is_dir():
                path = path / f"{self.started:%d-%b-%y-%H:%M:%S}-mem_track.txt"
            self.log_path = path
            with open(path, "w", encoding="utf-8") as f:
                f.write(f"{self.device.type.upper()} Memory Track | {self.started:%d-%b-%y-%H:%M:%S}\n\n")
        self._accounting: Any = None
        if self.device.type == "cpu":
            from estimator.peak.sim.tracker import StorageTracker

            self._accounting = StorageTracker()
            self._accounting.__enter__()
        else:
            torch.cuda.reset_peak_memory_stats(self.device)

    # -- context -----------------------------------------------------------------------------
    def __enter__(self) -> MemTracker:  # noqa: PYI034  (final in practice; Self needs 3.11)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the CPU accounting (nothing to do on CUDA). ``track()`` still works after it."""
        if self._accounting is not None and not getattr(self, "_closed", False):
            self._accounting.__exit__(None, None, None)
            self._closed = True

    # -- tracking ----------------------------------------------------------------------------
    def track(self) -> TrackPoint:
        """Record the tensors that appeared and disappeared since the last call, and the memory."""
        frame = inspect.stack(context=0)[1]
        current = self._live_tensors()
        changes = self._diff(current)
        storages: dict[int, int] = {}
        for t in current.values():
            with _suppress():
                st = t.untyped_storage()
                storages[st.data_ptr()] = st.nbytes()
        if self.device.type == "cuda":
            allocated = torch.cuda.memory_allocated(self.device)
            peak = torch.cuda.max_memory_allocated(self.device)
            reserved: int | None = torch.cuda.memory_reserved(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            accounting = "cuda-allocator"
        else:
            acc = self._accounting
            for t in current.values():
                with _suppress():
                    acc.register(t, acc.new_component)
            allocated, peak, reserved = acc.live_bytes, acc.peak_bytes, None
            acc.reset_peak()
            accounting = "dispatch"
        point = TrackPoint(
            time=_dt.datetime.now(), file=frame.filename, line=frame.lineno, function=frame.function,
            changes=changes, tensor_bytes=sum(storages.values()), allocated_bytes=allocated,
            peak_bytes=max(peak, allocated), reserved_bytes=reserved, accounting=accounting,
        )
        self.points.append(point)
        if self.log_path is not None:
            with open(self.log_path, "a", encoding="utf-8") as f:
                f.write("\n".join([point.header(), "", *(c.line() for c in changes), "", ""]))
        return point

    def clear_cache(self) -> None:
        """Collect garbage and, on CUDA, give cached blocks back (``torch.cuda.empty_cache``)."""
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def _live_tensors(self) -> dict[int, torch.Tensor]:
        found: dict[int, torch.Tensor] = {}
        tensor = torch.Tensor
        for obj in gc.get_objects():
            # type(), not isinstance(): some objects compute __class__ (deprecated aliases warn).
            if issubclass(type(obj), tensor):
                with _suppress():
                    if _on(obj, self.device) and not _is_fake(obj):
                        found[id(obj)] = obj
        return found

    def _diff(self, current: dict[int, torch.Tensor]) -> tuple[TensorChange, ...]:
        appeared: Counter[tuple[tuple[int, ...], str, str, int]] = Counter()
        gone: Counter[tuple[tuple[int, ...], str, str, int]] = Counter()
        known: dict[int, tuple[weakref.ref[torch.Tensor], tuple[tuple[int, ...], str, str, int]]] = {}
        for key, t in current.items():
            old = self._known.get(key)
            info = (tuple(t.shape), str(t.dtype), "Parameter" if isinstance(t, torch.nn.Parameter) else "Tensor",
                    t.numel() * t.element_size())
            if old is None or old[0]() is not t:
                appeared[info] += 1
            known[key] = (weakref.ref(t), info)
        for key, (ref, info) in self._known.items():
            if key not in known or ref() is None or known[key][0]() is not ref():
                gone[info] += 1
        self._known = known
        lines = [TensorChange("+", n, i[0], i[1], i[2], n * i[3]) for i, n in appeared.items()]
        lines += [TensorChange("-", n, i[0], i[1], i[2], n * i[3]) for i, n in gone.items()]
        return tuple(lines)

    # -- results -----------------------------------------------------------------------------
    def to_dataframe(self) -> pd.DataFrame:
        """One row per ``track()``: site, time, bytes now, peak since the previous call, changes."""
        import pandas as pd

        return pd.DataFrame.from_records(
            [
                {
                    "time": p.time, "file": p.file, "line": p.line, "function": p.function,
                    "tensor_bytes": p.tensor_bytes, "allocated_bytes": p.allocated_bytes, "peak_bytes": p.peak_bytes,
                    "reserved_bytes": p.reserved_bytes, "accounting": p.accounting,
                    "appeared_bytes": sum(c.nbytes for c in p.changes if c.sign == "+"),
                    "disappeared_bytes": sum(c.nbytes for c in p.changes if c.sign == "-"),
                }
                for p in self.points
            ]
        )

    def changes(self) -> pd.DataFrame:
        """One row per ``+``/``-`` line of every ``track()``."""
        import pandas as pd

        return pd.DataFrame.from_records(
            [
                {"track": i, "line": p.line, "function": p.function, "sign": c.sign, "count": c.count,
                 "shape": c.shape, "dtype": c.dtype, "kind": c.kind, "nbytes": c.nbytes}
                for i, p in enumerate(self.points)
                for c in p.changes
            ],
            columns=["track", "line", "function", "sign", "count", "shape", "dtype", "kind", "nbytes"],
        )


class _suppress:
    """Skip objects that fail on inspection (some tensor subclasses, half-built objects)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> bool:
        return exc_type is not None and issubclass(exc_type, (RuntimeError, NotImplementedError, ReferenceError, AttributeError))


def _on(t: torch.Tensor, device: torch.device) -> bool:
    if t.device.type != device.type:
        return False
    return device.index is None or t.device.index == device.index


def _is_fake(t: torch.Tensor) -> bool:
    return t.is_meta or type(t).__name__ == "FakeTensor"
