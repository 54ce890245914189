"""Stage 6, will it fit: each row against one GPU, and the largest batch and context that fit.

:func:`with_fit` adds to every row its ``runtime_overhead`` for the GPU (:mod:`estimator.fit.runtime`)
and ``fit``: whether the peak plus that overhead is within the memory the GPU's driver reports,
the headroom, and — for simulated inference and training rows — the largest batch at this
sequence length and the longest sequence at this batch that fit, each found by
:func:`estimator.fit.solver.largest_fitting` from fresh simulations and verified on both sides.

Each search starts from a guess that costs no simulation (:func:`_guess`): the row's own peak,
with the parts that grow with the knob (everything but the weights, gradients and optimizer states;
for the sequence also the SSM states and the image or audio encoder's activations) scaled in
proportion to it — a line through the one point simulated, aimed at the capacity less the runtime
overhead found there. Batch and (with fused attention) sequence move the peak affinely within one
program, so the guess and its neighbour, both simulated, usually bracket the boundary: two
simulations per knob where a blind start took three to six. Where the guess misses (the allocator's
segments, eager attention's quadratic term, a peak that moves to another phase) the search goes on
from the values simulated, to a boundary verified the same way (:mod:`estimator.fit.solver`).
The sequence's guess is better taken from the batch search's simulations, which measured how the whole need
(allocator and runtime overhead included) grows with the tokens of a step (:func:`_seq_guess`): that guess and,
when it misses, the step below it are simulated first.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from estimator.fit.runtime import needed_bytes, runtime_overhead, unverified_note
from estimator.fit.solver import Boundary, largest_fitting

if TYPE_CHECKING:
    from estimator.fit.gpus import GPU
    from estimator.result import Row

__all__ = ["MAX_BATCH", "SEQ_STEP", "with_fit"]

MAX_BATCH = 1 << 16  # the largest batch size asked about
MAX_SEQ = 1 << 20  # the longest sequence asked about where the model states no maximum
# The longest sequence is searched in steps of this many tokens: each token more is one more
# simulation near the boundary (the allocator's segments make the need a staircase there), and
# no one plans a context to the token. The step above the answer is simulated and does not fit.
SEQ_STEP = 64

# (batch_size, seq_len) -> the row simulated at that shape (peak_bytes and runtime_overhead set), for one dtype
Simulate = Callable[[int, int], "Row"]


def with_fit(
    rows: tuple[Row, ...], *, mode: str, gpu: GPU, batch_size: int, seq_len: int,
    simulators: dict[str, Simulate] | None = None, seq_limit: int | None = None, vary_seq: bool = True,
) -> tuple[Row, ...]:
    """``rows`` with ``runtime_overhead`` and ``fit`` for ``gpu``; ``simulators`` (by dtype) re-run a
    row at another shape for the largest batch and sequence (``seq_limit``: the model's maximum)."""
    out = []
    for row in rows:
        needed = needed_bytes(row, mode, gpu)
        fit: dict[str, Any] = {
            "gpu": gpu.name, "capacity_bytes": gpu.total_bytes, "needed_bytes": needed,
            "fits": None if needed is None else needed <= gpu.total_bytes,
            "headroom_bytes": None if needed is None else gpu.total_bytes - needed,
            "max_batch_size": None, "max_seq_len": None,
        }
        if str(row.dtype) == "bfloat16" and gpu.native_bf16 is False:
            fit["warning"] = f"the {gpu.name} has no native bfloat16 (compute capability {gpu.compute_capability}): use float16"
        simulate = (simulators or {}).get(str(row.dtype))
        if mode != "load" and needed is not None and simulate is not None and row.method == "simulated":
            batches: dict[int, int] = {}  # batch size -> bytes needed at seq_len (the batch search's simulations)

            def total(b: int, s: int, simulate: Simulate = simulate, batches: dict[int, int] = batches) -> tuple[int, int]:
                """Bytes needed, and the peak of live bytes alone (smooth in b and s; the solver predicts with it)."""
                again = simulate(b, s)
                found = needed_bytes(again, mode, gpu)
                assert found is not None and again.peak_bytes is not None
                if s == seq_len:
                    batches[b] = found
                return found, again.peak_bytes

            at_shape = (needed, row.peak_bytes or 0)
            target = gpu.total_bytes - (needed - (row.peak_bytes or 0))  # the peak that fits, the overhead as here
            batch = largest_fitting(lambda b: total(b, seq_len), gpu.total_bytes, limit=MAX_BATCH, known={batch_size: at_shape},
                                    guess=_guess(row.peak_bytes, row.components, batch_size, target, _FIXED_IN_BATCH))
            fit.update(max_batch_size=batch.value, batch_boundary=_boundary(batch))
            if vary_seq:
                by_batch = _seq_guess(batches, batch_size, seq_len, needed, gpu.total_bytes)
                longest, seq_boundary = _longest(lambda s: total(batch_size, s), gpu.total_bytes, seq_limit or MAX_SEQ,
                                                 seq_len, at_shape,
                                                 by_batch if by_batch is not None else
                                                 _guess(row.peak_bytes, row.components, seq_len, target, _FIXED_IN_SEQ),
                                                 below=by_batch is not None)
                fit.update(max_seq_len=longest, seq_boundary=seq_boundary)
        overhead = runtime_overhead(row, mode, gpu)
        out.append(replace(row, fit=fit, runtime_overhead=overhead, notes=(*row.notes, unverified_note(overhead))))
    return tuple(out)


# what a row's peak holds whatever the batch size, or the sequence length (Component values)
_FIXED_IN_BATCH = frozenset({"weights", "gradients", "optimizer_states"})
_FIXED_IN_SEQ = _FIXED_IN_BATCH | {"conv_state", "ssm_state", "encoder_activations"}


def _guess(peak: int | None, components: Mapping[str, int] | None, at: int, target: int, fixed: frozenset[str]) -> int | None:
    """Where the peak would reach ``target`` if every component outside ``fixed`` grew in proportion
    to the knob from its value ``at`` (a guess: the search simulates it and its neighbour)."""
    moving = sum(v for k, v in (components or {}).items() if k not in fixed)
    if peak is None or moving <= 0:
        return None
    return max(1, at * (target - (peak - moving)) // moving)


def _seq_guess(batches: Mapping[int, int], batch_size: int, seq_len: int, needed: int, capacity: int) -> int | None:
    """Where the bytes needed would reach ``capacity`` along the sequence, from the batch search's simulations
    at ``seq_len`` (``batches``: batch size -> bytes needed; ``needed`` at ``batch_size``), or ``None`` without one.

    What grows with the batch size at one length is, in a decoder's step, what holds a row per token of every
    sequence (activations, the KV cache, the logits kept for the loss; the allocator's blocks for them): its
    bytes grow as batch x length. So the slope in the length at ``batch_size`` is taken as the measured slope
    in the batch size (whole bytes needed, the allocator's and runtime's overhead included), times
    ``batch_size / seq_len``. The batch point used is the largest that fits (the nearest below the capacity),
    else the smallest that does not. A guess only: the search simulates it and its neighbour, goes on from
    them where they miss, and verifies its answer (the length fits and one step more does not, both simulated);
    on the 8B models of ``bench/fit_speed.py``, rounded up to a step, it lands on the boundary or one step above
    it (two simulations, where the line through the row's own peak components took three)."""
    others = {b: n for b, n in batches.items() if b != batch_size}
    fitting = [b for b, n in others.items() if n <= capacity]
    if not others:
        return None
    b1 = max(fitting) if fitting else min(others)
    grown = (others[b1] - needed) * batch_size  # bytes per (b1 - batch_size) x seq_len more tokens, at batch_size
    if grown == 0 or (grown > 0) != (b1 > batch_size):
        return None
    return max(1, seq_len + (capacity - needed) * seq_len * (b1 - batch_size) // grown)


def _longest(total: Callable[[int], tuple[int, int]], capacity: int, limit: int, seq_len: int,
             at_shape: tuple[int, int], guess: int | None = None, below: bool = False) -> tuple[int | None, dict[str, Any]]:
    """The longest sequence that fits, in steps of :data:`SEQ_STEP` tokens (the last step ends at ``limit``);
    below one step, in single tokens. The answer and the step above it are both simulated; ``guess`` (tokens),
    where the search starts (``below``: a guess rounded up to a step, which where it does not fit has the step
    below it simulated too: a guess one step high costs no more than one on the boundary, and one step low would
    send the search on past both)."""
    step = SEQ_STEP if limit >= SEQ_STEP else 1

    def length(n: int) -> int:
        return min(n * step, limit)

    top = -(-limit // step)  # the last step: length(top) == limit
    known = {top: at_shape} if seq_len == limit else {seq_len // step: at_shape} if seq_len % step == 0 else {}
    found = largest_fitting(lambda n: total(length(n)), capacity, limit=top, known=known,
                            guess=None if guess is None else max(1, -(-guess // step) if below else guess // step), below=below)
    if found.value is None and step > 1:  # not even one step: single tokens below it
        small = largest_fitting(total, capacity, limit=step - 1, known={seq_len: at_shape} if seq_len < step else {},
                                guess=guess)
        return small.value, _boundary(small, limit=limit, evaluations=small.evaluations + found.evaluations)
    return None if found.value is None else length(found.value), _boundary(found, step=step, limit=limit)


def _boundary(b: Boundary, *, step: int = 1, limit: int | None = None, evaluations: int | None = None) -> dict[str, Any]:
    """The two simulations that verify an answer: the bytes needed at it and one step above."""
    return {"needed_at_max": b.needed, "needed_above_max": b.next_needed, "limit": b.limit if limit is None else limit,
            "step": step, "simulations": b.evaluations if evaluations is None else evaluations}
