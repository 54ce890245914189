"""Independent truth the tests compare against: bytes of real tensors, and the CPU allocator's peak."""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

import torch


def storage_bytes(model: torch.nn.Module) -> int:
    """Bytes of the unique storages behind every parameter and buffer (tied weights once)."""
    storages: dict[int, int] = {}
    for tensor in [*model.parameters(), *model.buffers()]:
        storage = tensor.untyped_storage()
        if storage.nbytes():  # an empty storage's pointer may equal another's (MobileBERT's 0-row dense at embedding_size == hidden_size)
            storages[storage.data_ptr()] = storage.nbytes()
    return sum(storages.values())


def unsaved_bytes(model: torch.nn.Module) -> int:
    """Bytes of the non-persistent buffers (rotary inv_freq, position ids): held in memory, never in a checkpoint."""
    return sum(
        buffer.untyped_storage().nbytes()
        for module in model.modules()
        for name, buffer in module.named_buffers(recurse=False)
        if name in module._non_persistent_buffers_set
    )


def trace_events(prof: Any) -> list[dict[str, Any]]:
    """The Chrome-trace events of a finished ``torch.profiler.profile``."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as handle:
            return list(json.load(handle)["traceEvents"])


def allocated_peak(events: list[dict[str, Any]], start: float | None = None, end: float | None = None) -> int:
    """The maximum "Total Allocated" of the memory events (within [start, end] when given): the CPU allocator's peak."""
    return max(
        e["args"]["Total Allocated"] for e in events
        if e.get("name") == "[memory]" and (start is None or start <= e["ts"]) and (end is None or e["ts"] <= end)
    )


def window_peak(events: list[dict[str, Any]], name: str) -> int:
    """The allocator's peak inside the ``record_function(name)`` window of a profile's events."""
    work = next(e for e in events if e.get("name") == name and e.get("ph") == "X")
    return allocated_peak(events, work["ts"], work["ts"] + work["dur"])
