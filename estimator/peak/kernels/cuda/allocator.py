"""PyTorch's CUDA caching allocator, replayed over a simulated allocation trace.

``torch.cuda.max_memory_allocated()`` is not what a GPU must hold: every request is rounded up
to a 512-byte multiple, and memory is reserved from the driver in segments that are split
between tensors and cached when they are freed, so ``torch.cuda.max_memory_reserved()`` — what
``nvidia-smi`` sees of the tensors — is higher, by an amount that depends on the order of the
allocations and frees. This module replays the simulation's allocations and frees, in their
order, through the rules of ``c10/cuda/CUDACachingAllocator.cpp`` (PyTorch 2.x, default
configuration: no ``PYTORCH_CUDA_ALLOC_CONF``, so no ``expandable_segments``, no
``max_split_size_mb``, no ``roundup_power2_divisions``, one stream):

- a request is rounded up to a multiple of 512 bytes (``kMinBlockSize``; ``round_size``);
- requests up to 1 MiB (``kSmallSize``) are served from the small pool, larger ones from the
  large pool (``get_pool``);
- the pool's smallest cached free block that is large enough is used, the lowest address on a
  tie (``get_free_block``: a ``std::set`` ordered by stream, size, address);
- if there is none, a new segment is reserved (``cudaMalloc``) of 2 MiB for small requests
  (``kSmallBuffer``), 20 MiB for requests under 10 MiB (``kLargeBuffer``), else the request
  rounded up to 2 MiB (``kRoundLarge``; ``get_allocation_size``);
- the block is split when the rest is at least 512 bytes (small pool) or more than 1 MiB (large
  pool), and the rest goes back to the pool (``should_split``);
- a freed block merges with free neighbours of its segment (``free_block``/``try_merge_blocks``);
  segments are never returned to the driver here (PyTorch returns them only on
  ``torch.cuda.empty_cache()`` or when a ``cudaMalloc`` fails).

The replay gives the allocated peak after rounding and the reserved peak. It assumes the run is
not near out-of-memory: close to capacity the real allocator frees its cached segments and
retries (``release_cached_blocks``), so it can succeed where the reserved peak here exceeds
capacity; the reserved peak is then the conservative figure. Not verified on a GPU in this
repository yet (no GPU was available); the rules are checked against the source in
``tests/test_cuda_allocator.py``.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["AllocatorPeaks", "CachingAllocator", "replay", "round_size", "segment_size"]

MIN_BLOCK = 512  # kMinBlockSize
SMALL_SIZE = 1 << 20  # kSmallSize: largest request of the small pool
SMALL_BUFFER = 2 << 20  # kSmallBuffer: small-pool segment
LARGE_BUFFER = 20 << 20  # kLargeBuffer: segment for requests of 1-10 MiB
MIN_LARGE_ALLOC = 10 << 20  # kMinLargeAlloc
ROUND_LARGE = 2 << 20  # kRoundLarge


def round_size(nbytes: int) -> int:
    """The bytes a request of ``nbytes`` takes (``round_size``)."""
    return MIN_BLOCK if nbytes < MIN_BLOCK else -(-nbytes // MIN_BLOCK) * MIN_BLOCK


def segment_size(rounded: int) -> int:
    """The segment reserved when no cached block fits a (rounded) request (``get_allocation_size``)."""
    if rounded <= SMALL_SIZE:
        return SMALL_BUFFER
    if rounded < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return -(-rounded // ROUND_LARGE) * ROUND_LARGE


class _Block:
    __slots__ = ("addr", "allocated", "next", "prev", "size", "small")

    def __init__(self, addr: int, size: int, small: bool) -> None:
        self.addr = addr
        self.size = size
        self.small = small
        self.allocated = False
        self.prev: _Block | None = None
        self.next: _Block | None = None


@dataclass(frozen=True)
class AllocatorPeaks:
    """What the replay found: peaks of the rounded allocated bytes and of the reserved bytes."""

    allocated_peak: int
    reserved_peak: int
    segments: int


class CachingAllocator:
    """The allocator's bookkeeping, one stream, no capacity limit (see the module docstring)."""

    def __init__(self) -> None:
        self._free: dict[bool, list[tuple[int, int, _Block]]] = {True: [], False: []}  # small? -> sorted (size, addr, block)
        self._next_addr = 0
        self._segments = 0
        self.allocated = 0
        self.reserved = 0
        self.allocated_peak = 0
        self.reserved_peak = 0

    def malloc(self, nbytes: int) -> _Block:
        size = round_size(nbytes)
        small = size <= SMALL_SIZE
        pool = self._free[small]
        i = bisect.bisect_left(pool, (size, -1))
        if i < len(pool):
            block = pool.pop(i)[2]
        else:  # cudaMalloc a new segment; addresses only order ties, so segments never overlap
            seg = segment_size(size)
            block = _Block(self._next_addr, seg, small)
            self._next_addr += seg
            self._segments += 1
            self.reserved += seg
            self.reserved_peak = max(self.reserved_peak, self.reserved)
        rest = block.size - size
        if (rest >= MIN_BLOCK) if small else (rest > SMALL_SIZE):
            remaining = _Block(block.addr + size, rest, small)
            remaining.prev, remaining.next = block, block.next
            if block.next is not None:
                block.next.prev = remaining
            block.next = remaining
            block.size = size
            bisect.insort(pool, (remaining.size, remaining.addr, remaining))
        block.allocated = True
        self.allocated += block.size
        self.allocated_peak = max(self.allocated_peak, self.allocated)
        return block

    def free(self, block: _Block) -> None:
        block.allocated = False
        self.allocated -= block.size
        pool = self._free[block.small]
        for neighbour in (block.prev, block.next):
            if neighbour is None or neighbour.allocated:
                continue
            del pool[bisect.bisect_left(pool, (neighbour.size, neighbour.addr))]
            if neighbour is block.prev:
                block.addr = neighbour.addr
                block.prev = neighbour.prev
                if neighbour.prev is not None:
                    neighbour.prev.next = block
            else:
                block.next = neighbour.next
                if neighbour.next is not None:
                    neighbour.next.prev = block
            block.size += neighbour.size
        bisect.insort(pool, (block.size, block.addr, block))

    def peaks(self) -> AllocatorPeaks:
        return AllocatorPeaks(self.allocated_peak, self.reserved_peak, self._segments)


def replay(events: Iterable[tuple[int, int]], *, resident: Iterable[int] = ()) -> AllocatorPeaks:
    """Replay ``events`` — ``(key, nbytes)`` to allocate, ``(key, -1)`` to free the block of
    ``key`` — after allocating the ``resident`` buffers that live for the whole run."""
    allocator = CachingAllocator()
    for nbytes in resident:
        allocator.malloc(nbytes)
    live: dict[int, _Block] = {}
    for key, nbytes in events:
        if nbytes > 0:  # a 0-byte request returns a null pointer without touching the pools
            live[key] = allocator.malloc(nbytes)
        elif nbytes == 0:
            continue
        else:
            block = live.pop(key, None)
            if block is not None:
                allocator.free(block)
    return allocator.peaks()
