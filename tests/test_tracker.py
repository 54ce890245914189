"""``MemTracker`` on real tensors: appear / disappear lines with exact sizes, memory, log, frames."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from estimator.modules.tracker import MemTracker, TrackPoint

MiB = 2**20


def _by(point: TrackPoint, sign: str) -> dict[tuple[tuple[int, ...], str], tuple[int, int]]:
    return {(c.shape, c.dtype): (c.count, c.nbytes) for c in point.changes if c.sign == sign}


@pytest.fixture
def no_gc() -> Iterator[None]:
    """Tensors other tests left in garbage cycles must not be freed halfway through a test."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def test_cpu_appear_disappear_exact_sizes_and_dispatch_accounting(tmp_path: Path, no_gc: None) -> None:
    with MemTracker("cpu", log=tmp_path) as tracker:
        start = tracker.track()
        a = torch.randn(30, 3, 512, 512)  # 90 MiB, as the seed README's dummy tensors
        b = torch.zeros(40, 3, 512, 512)
        ids = torch.zeros(1000, dtype=torch.int64)
        made = tracker.track()
        del b
        freed = tracker.track()
        layer = nn.Linear(256, 512)
        x = torch.randn(64, 256)
        img = torch.randn(8, 4, 32, 32, requires_grad=True)
        # autograd keeps tanh's output (64 x 512 floats) and max_pool2d's int64 indices, which
        # never become a Python object
        loss = torch.tanh(layer(x)).sum() + F.max_pool2d(img, 2).sum()
        forward = tracker.track()
        loss.backward()
        del loss
        backward = tracker.track()
    # the first track lists whatever tensors exist already (other tests' too), as the seed tool does
    assert start.accounting == "dispatch" and start.reserved_bytes is None

    plus = _by(made, "+")
    assert plus[((30, 3, 512, 512), "torch.float32")] == (1, 90 * MiB)
    assert plus[((40, 3, 512, 512), "torch.float32")] == (1, 120 * MiB)
    assert plus[((1000,), "torch.int64")] == (1, 8000)
    assert made.allocated_bytes - start.allocated_bytes == 210 * MiB + 8000
    assert made.line == start.line + 4 and made.function.startswith("test_cpu_appear")
    assert made.file == __file__

    assert _by(freed, "-") == {((40, 3, 512, 512), "torch.float32"): (1, 120 * MiB)}
    assert _by(freed, "+") == {}
    assert made.allocated_bytes - freed.allocated_bytes == 120 * MiB
    assert freed.peak_bytes == made.allocated_bytes  # nothing grew in between

    kinds = {(c.shape, c.kind) for c in forward.changes if c.sign == "+"}
    assert ((512, 256), "Parameter") in kinds and ((512,), "Parameter") in kinds
    # Under the CPU accounting every op output passes through Python, so even the indices that
    # max_pool2d saves for backward (made in C++) show as a line; the bytes agree.
    indices = 8 * 4 * 16 * 16 * 8
    saved = 64 * 512 * 4 + indices
    params = (512 * 256 + 512) * 4
    visible = params + 64 * 256 * 4 + 8 * 4 * 32 * 32 * 4 + 4  # weights, x, img, the scalar loss
    assert forward.allocated_bytes - freed.allocated_bytes == visible + saved
    assert _by(forward, "+")[((8, 4, 16, 16), "torch.int64")] == (1, indices)
    assert forward.tensor_bytes == forward.allocated_bytes

    grads = _by(backward, "+")
    assert grads[((512, 256), "torch.float32")] == (1, 512 * 256 * 4)
    assert backward.allocated_bytes - forward.allocated_bytes == params + 8 * 4 * 32 * 32 * 4 - saved - 4

    (log,) = tmp_path.iterdir()
    text = log.read_text()
    assert log.name.endswith("-mem_track.txt") and text.startswith("CPU Memory Track | ")
    assert "+ | 1 * Size:(30, 3, 512, 512)    | Memory: 90 MiB | Tensor | torch.float32" in text
    assert "- | 1 * Size:(40, 3, 512, 512)    | Memory: 120 MiB | Tensor | torch.float32" in text
    assert f"At test_tracker.py line {made.line}: test_cpu_appear" in text

    frame = tracker.to_dataframe()
    assert list(frame.line) == [p.line for p in tracker.points]
    assert frame.appeared_bytes[1] == 210 * MiB + 8000
    changes = tracker.changes()
    assert set(changes.sign) == {"+", "-"} and changes.nbytes.sum() > 0
    del a, ids, layer, x, img


def test_track_after_close_still_lists_tensors() -> None:
    tracker = MemTracker("cpu")
    tracker.close()
    t = torch.ones(10)
    point = tracker.track()
    assert ((10,), "torch.float32") in _by(point, "+")
    del t


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device: the allocator statistics path")
def test_cuda_allocator_statistics(no_gc: None) -> None:
    tracker = MemTracker("cuda")
    base = tracker.track()
    a = torch.randn(30, 3, 512, 512, device="cuda")
    layer = nn.Linear(1024, 1024).cuda()
    x = torch.randn(256, 1024, device="cuda")
    loss = torch.tanh(layer(x)).sum()
    point = tracker.track()
    assert point.accounting == "cuda-allocator" and point.reserved_bytes is not None
    assert _by(point, "+")[((30, 3, 512, 512), "torch.float32")] == (1, 90 * MiB)
    # the allocator counts the saved tanh output the Python scan cannot see (blocks round to 512 B)
    assert point.allocated_bytes - base.allocated_bytes >= 90 * MiB + 256 * 1024 * 4 * 2
    assert point.reserved_bytes >= point.allocated_bytes
    del a, loss
    tracker.clear_cache()
    after = tracker.track()
    assert ((30, 3, 512, 512), "torch.float32") in _by(after, "-")
    assert after.allocated_bytes < point.allocated_bytes
