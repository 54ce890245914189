"""The largest value of one knob (batch size, sequence length) whose memory fits a capacity.

The memory a step needs is piecewise polynomial in the batch size (affine) and in the sequence
length (affine with fused attention, quadratic with eager attention), plus the allocator's
rounding. So the boundary is found the way a root is found, not by a scan: a quadratic through
the values known so far predicts where ``needed(x)`` crosses the capacity, the prediction and
the next value up are simulated, and the bracket ``[largest that fits, smallest that does not]``
shrinks (to a bisection step where a prediction falls outside it) until the two are neighbours.
Every answer is verified: ``needed(value) <= capacity < needed(value + 1)``, both simulated.

A caller that knows the peak's shape passes a ``guess`` (:mod:`estimator.fit.plan`: a line through
the one simulated point, its slope from what grows with the knob at that point's peak): the guess
(when the guess fits) its neighbour above are simulated first — one on each side of the boundary
when the guess is right, so the answer costs two simulations — and the search above goes on from
them when it is not. Each prediction inside the bracket is simulated with its neighbour on the other
side too, so a prediction one off closes the bracket instead of leaving it one wide.
Where ``needed`` is non-decreasing the verified pair is the one boundary there is, whatever the
guess. The allocator's segments can break that by a few MiB (a larger value fitting again), and then
two searches may stop at different verified boundaries: ``tests/test_fit.py`` checks the answers
against an exhaustive scan (every value up to the first that does not fit), and
``bench/fit_speed.py --unguided`` that the guided and unguided searches agree on 8B models.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from math import isqrt

__all__ = ["Boundary", "largest_fitting"]


@dataclass(frozen=True)
class Boundary:
    """The answer for one knob: ``value`` fits (``None``: not even ``minimum``), ``value + 1``
    does not (unless ``value == limit``, the largest value asked about)."""

    value: int | None
    limit: int
    needed: int | None  # bytes needed at value
    next_needed: int | None  # bytes needed at value + 1 (None at the limit or when nothing fits)
    evaluations: int

    @property
    def at_limit(self) -> bool:
        return self.value is not None and self.value >= self.limit


def largest_fitting(
    needed: Callable[[int], int | tuple[int, int]], capacity: int, *, limit: int,
    known: Mapping[int, int | tuple[int, int]] | None = None, minimum: int = 1, max_evaluations: int = 40,
    guess: int | None = None, below: bool = False,
) -> Boundary:
    """The largest ``x`` in ``[minimum, limit]`` with ``needed(x) <= capacity``.

    ``needed`` must be non-decreasing; it may return ``(total, smooth)``, where ``smooth`` is the
    part that is polynomial in ``x`` (the peak of live bytes, without the allocator's segment
    steps): predictions then fit ``smooth`` and aim at the capacity less the largest difference
    seen, so an affine or quadratic peak is predicted in one step. ``known`` holds values already
    computed; ``guess``, where the boundary is expected (the guess and, when it fits or ``below`` is
    set, its neighbour on the other side are simulated first). Raises ``RuntimeError`` if the bracket does not close within ``max_evaluations``.
    """
    seen: dict[int, int] = {}
    smooth: dict[int, int] = {}
    evaluations = 0

    def record(x: int, value: int | tuple[int, int]) -> None:
        total, part = value if isinstance(value, tuple) else (value, value)
        seen[x], smooth[x] = total, part

    for x, value in (known or {}).items():
        record(x, value)

    def at(x: int) -> int:
        nonlocal evaluations
        if x not in seen:
            evaluations += 1
            record(x, needed(x))
        return seen[x]

    fitting = [x for x, v in seen.items() if v <= capacity]
    if not fitting and at(minimum) > capacity:  # monotone: a known value that fits says minimum does
        return Boundary(None, limit, None, seen[minimum], evaluations)
    lo = max([minimum, *fitting]) if fitting else minimum  # lo fits; hi (when known) does not
    hi = min((x for x, v in seen.items() if v > capacity), default=None)

    def bracket(x: int, below: bool = True) -> None:
        """Simulate ``x`` and its neighbour on the other side of the boundary (below a miss only if ``below``):
        a prediction one off closes the bracket."""
        nonlocal lo, hi
        fits = at(x) <= capacity
        if fits:
            lo = x
        else:
            hi = x
        other = x + 1 if fits else x - 1
        if (fits or below) and lo < other < (limit + 1 if hi is None else hi):
            if at(other) <= capacity:
                lo = other
            else:
                hi = other

    if guess is not None and lo < limit and (hi is None or hi > lo + 1):
        # a guess that does not fit: the line through it and lo predicts better than its neighbour would
        # (unless ``below``: a guess expected at the boundary or one above it)
        bracket(min(max(guess, lo + 1), limit if hi is None else hi - 1), below=below)
    if hi is None and len(seen) < 2 and lo < limit:
        x = min(limit, 2 * lo)
        if at(x) <= capacity:
            lo = x
        else:
            hi = x
    width = None  # the bracket's width before the last step
    stalls = 0  # steps in a row that did not halve the bracket (then bisection)
    while True:
        if lo >= limit:
            return Boundary(limit, limit, seen[lo], None, evaluations)
        if hi is not None and hi == lo + 1:
            return Boundary(lo, limit, seen[lo], seen[hi], evaluations)
        if evaluations >= max_evaluations:
            raise RuntimeError(f"the fit boundary did not close in {max_evaluations} simulations (between {lo} and {hi})")
        # Extrapolating: the smooth part, aimed at the capacity less the overhead seen at lo; inside the
        # bracket: the totals themselves (the overhead moves with x too).
        guess = _predict(smooth, capacity - (seen[lo] - smooth[lo]), lo, hi) if hi is None else _predict(seen, capacity, lo, hi)
        stalls = stalls + 1 if width is not None and hi is not None and 2 * (hi - lo) > width else 0
        width = None if hi is None else hi - lo
        if hi is None:  # not bracketed yet: grow by 2x to 16x (a prediction from a flat start can overshoot by orders)
            x = min(limit, max(2 * lo, min(16 * lo, guess if guess is not None else 2 * lo)))
        elif guess is None or stalls >= 2:
            x = (lo + hi) // 2
        else:
            if stalls:  # the last step did not halve the bracket: bisect once
                x = (lo + hi) // 2
            else:  # a prediction (at or past an end: the neighbour of that end), with its neighbour on the other side
                bracket(min(max(guess, lo + 1), hi - 1))
                continue
        if at(x) <= capacity:
            lo = x
        else:
            hi = x


def _predict(seen: dict[int, int], capacity: int, lo: int, hi: int | None) -> int | None:
    """Where ``needed`` is predicted to cross the capacity: a quadratic through three known values
    (a line through two) — the bracket's ends and the value between them nearest the capacity, or,
    before the boundary is bracketed, the largest values known. Wide spans average out the
    allocator's segment steps, which make neighbouring values a poor guide to the slope."""
    if hi is None:
        points = sorted(seen.items())[-3:]
    else:
        inside = [(x, v) for x, v in seen.items() if lo < x < hi]
        middle = min(inside, key=lambda kv: abs(kv[1] - capacity), default=None)
        points = sorted([(lo, seen[lo]), (hi, seen[hi]), *([middle] if middle else [])])
    if len(points) < 2:
        return None
    if len(points) == 3:
        (x0, y0), (x1, y1), (x2, y2) = ((Fraction(x), Fraction(y)) for x, y in points)
        # Newton form: y = y0 + d01 (x - x0) + d2 (x - x0)(x - x1)
        d01 = (y1 - y0) / (x1 - x0)
        d12 = (y2 - y1) / (x2 - x1)
        d2 = (d12 - d01) / (x2 - x0)
        a, b, c = d2, d01 - d2 * (x0 + x1), y0 - d01 * x0 + d2 * x0 * x1
        if a > 0:
            disc = b * b - 4 * a * (c - capacity)
            if disc >= 0:
                root = (-b + Fraction(isqrt(int(disc * 10**12)), 10**6)) / (2 * a)  # the larger root
                return int(root // 1)
        points = [points[0], points[-1]]
    (xa, ya), (xb, yb) = points[0], points[-1]
    if ya == yb:
        return None
    return int((Fraction(capacity - ya) * (xb - xa) / (yb - ya) + xa) // 1)
