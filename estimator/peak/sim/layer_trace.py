"""The whole model's allocation trace, built from the traces of its layer samples.

The CUDA caching allocator (:mod:`estimator.peak.kernels.cuda.allocator`) is replayed over the
step's allocations and frees in their order: its figures (rounding, reserved segments) are not
linear in the layers, so they cannot be extrapolated the way the live peak is
(:mod:`estimator.peak.sim.layers`). The trace itself can: a model of ``N`` alike layers allocates
and frees the same events per layer, so the trace of ``k`` layers is a fixed part with, at a few
places (the weights, each layer's forward, backward and optimizer work), ``k`` copies of one layer's
events. :func:`whole_trace` finds those places from the samples of 2, 3 and 4 layers and writes the
trace of ``N`` layers, event by event, then replays nothing itself (the caller does).

How, and what is checked (any failure returns ``None``: the caller simulates the whole model):

1. Each sample's events become a canonical sequence: a token per event (``+nbytes`` for an
   allocation, ``-nbytes`` for its free; zero-byte requests, which the allocator never sees, and
   the frees after the last allocation, which cannot change a peak, are left out) and, for each
   event, the position of its partner (the free of an allocation, the allocation of a free).
2. The 4-layer tokens are aligned on the 3-layer ones: where they part, the 4-layer sample has a
   run of one layer's events more (a block equal to the one before it, after which the two agree
   again). Each such run, extended as far as it repeats, is a *run piece* of copies of its block;
   the rest are *fixed pieces*. The run pieces' copy counts fall by one per layer less.
3. Each allocation's partner is described by a rule that holds for every copy and every sample: the
   same copy of another run (``c' = c + d``: the forward's layer and the same layer's gradient in the
   optimizer), the mirrored copy (``c' = m' - 1 - c + d``: a forward activation freed in the
   backward, which runs the layers in reverse), a fixed copy counted from either end, or a fixed event.
4. The model is checked to give back the 2-, 3- and 4-layer samples exactly (every token and every
   partner: sizes and lifetimes, event by event), and only then written out for ``N`` layers.

The pieces and rules (a :class:`Proof`) are kept per row (:class:`Periodicity`): the fit search's other shapes
run the 3-layer sample only and are written by :func:`whole_trace_from_one` where a proof gives it back exactly
(also with a few events more inside one fixed piece, allocated and freed there, or one allocated in a fixed piece and
freed in a later one: a copy where the proof's shape took a view), else the 4-layer sample too (:func:`whole_trace_from`: both given back exactly), else all three.

``tests/test_layer_trace.py`` checks the allocator's figures from the written trace against the
whole model's simulation on several families, and that models whose layer samples are not periodic
fall back.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import combinations
from math import comb

__all__ = ["Periodicity", "Proof", "prove", "whole_trace", "whole_trace_from", "whole_trace_from_one", "written_from"]

logger = logging.getLogger(__name__)

Event = tuple[int, int]  # (key, nbytes) to allocate, (key, -1) to free (StorageTracker.events)

_LOOKAHEAD = 256  # events compared past a candidate insertion (the longest agreement wins)


@dataclass(frozen=True)
class _Canonical:
    tokens: list[int]  # +nbytes: an allocation; -nbytes: its free
    partner: list[int]  # the partner event's position; -1: an allocation never freed (within the trace)
    keys: list[int] = field(default_factory=list, compare=False)  # each allocation's event key (a free: -1)


@dataclass(frozen=True)
class _Piece:
    start: int  # position in the top sample's tokens
    length: int  # a fixed piece's events, or a run's block length
    copies: int  # a run's copies in the top sample; 0 for a fixed piece
    per_layer: int = 0  # a run's copies more per layer (a layer's block may repeat a shorter one)

    @property
    def is_run(self) -> bool:
        return self.copies > 0


def canonical(events: Sequence[Event]) -> _Canonical:
    """The tokens and partners of a trace (see the module docstring, step 1). The frees between two allocations
    are put in the order of their allocations: the allocator's state after them does not depend on their order
    (a freed block merges with whichever free neighbours it has; after the last of them every run of free
    neighbours is one block, whatever the order), and some come in an order of the garbage collector's."""
    last = max((i for i, (_, n) in enumerate(events) if n > 0), default=-1)
    tokens: list[int] = []
    partner: list[int] = []
    keys: list[int] = []
    live: dict[int, int] = {}
    freed: list[int] = []  # the allocations freed since the last allocation

    def flush() -> None:
        for at in sorted(freed):
            partner[at] = len(tokens)
            tokens.append(-tokens[at])
            partner.append(at)
            keys.append(-1)
        freed.clear()

    for key, nbytes in events[:last + 1]:
        if nbytes > 0:
            flush()
            live[key] = len(tokens)
            tokens.append(nbytes)
            partner.append(-1)
            keys.append(key)
        elif nbytes < 0:
            at = live.pop(key, None)
            if at is not None:  # else the free of a zero-byte request
                freed.append(at)
    return _Canonical(tokens, partner, keys)


def _lcp(a: list[int], i: int, b: list[int], j: int, cap: int) -> int:
    n = min(cap, len(a) - i, len(b) - j)
    if a[i:i + n] == b[j:j + n]:
        return n
    k = 0
    while k < n and a[i + k] == b[j + k]:
        k += 1
    return k


def _insertions(a: list[int], b: list[int]) -> list[tuple[int, int]] | None:
    """Where ``b`` (one layer more) has a block more than ``a``: ``(position in b, length)`` each, or ``None``."""
    extra = len(b) - len(a)
    if extra <= 0:
        return None
    found: list[tuple[int, int]] = []
    i = j = 0
    while True:
        step = _lcp(a, i, b, j, len(b))
        i, j = i + step, j + step
        if i == len(a) and j == len(b):
            break
        left = extra - sum(n for _, n in found)
        best: tuple[int, int] | None = None  # (length, agreement after it)
        for n in range(1, min(left, j, len(b) - j) + 1):
            if b[j:j + n] != b[j - n:j]:  # the block more repeats the one before it
                continue
            agree = _lcp(a, i, b, j + n, _LOOKAHEAD)
            if agree == min(_LOOKAHEAD, len(a) - i) and (best is None or agree > best[1]):
                best = (n, agree)
                break
            if best is None or agree > best[1]:
                best = (n, agree)
        if best is None or (best[1] == 0 and i < len(a)):
            return None
        found.append((j, best[0]))
        j += best[0]
    if sum(n for _, n in found) != extra:
        return None
    return found


def _period(block: list[int]) -> int:
    """The shortest period of ``block`` that divides its length."""
    n = len(block)
    return next(p for p in range(1, n + 1) if n % p == 0 and block[p:] == block[:-p])


def _pieces(tokens: list[int], inserted: list[tuple[int, int]], lose: int, shortest: bool) -> list[_Piece] | None:
    """The top sample cut into fixed pieces and runs of whole copies (see the module docstring, step 2); each run
    keeps a copy after ``lose`` layers less. ``shortest``: a run's block is the shortest period of a layer's
    events (a burst of frees of two layers' worth of alike tensors), else a layer's events (a layer's keys and
    values, alike, each its own)."""
    pieces: list[_Piece] = []
    done = 0
    for at, inserted_length in inserted:
        length = _period(tokens[at:at + inserted_length]) if shortest else inserted_length
        per_layer = inserted_length // length
        start = at
        while start > done and tokens[start - 1] == tokens[start - 1 + length]:
            start -= 1
        end = at + length
        while end < len(tokens) and tokens[end] == tokens[end - length]:
            end += 1
        first = at - ((at - start) // length) * length
        copies = (end - first) // length
        if first < done or copies - lose * per_layer < 1:  # overlapping runs, or too few copies
            return None
        if first > done:
            pieces.append(_Piece(done, first - done, 0))
        pieces.append(_Piece(first, length, copies, per_layer))
        done = first + copies * length
    if done < len(tokens):
        pieces.append(_Piece(done, len(tokens) - done, 0))
    return pieces


class _Layout:
    """The trace of the model with ``fewer`` layers less than the top sample: its tokens, and the
    (piece, copy, offset) of every position."""

    def __init__(self, pieces: list[_Piece], top: list[int], fewer: int) -> None:
        self.pieces = pieces
        self.copies = [p.copies - fewer * p.per_layer if p.is_run else 0 for p in pieces]
        self.starts: list[int] = []
        self.tokens: list[int] = []
        self.where: list[tuple[int, int, int]] = []
        for index, (piece, copies) in enumerate(zip(pieces, self.copies, strict=True)):
            self.starts.append(len(self.tokens))
            block = top[piece.start:piece.start + piece.length]
            if not piece.is_run:
                self.tokens += block
                self.where += [(index, -1, o) for o in range(piece.length)]
                continue
            for c in range(copies):
                self.tokens += block
                self.where += [(index, c, o) for o in range(piece.length)]

    def position(self, piece: int, copy: int, offset: int) -> int | None:
        if self.pieces[piece].is_run:
            if not 0 <= copy < self.copies[piece]:
                return None
            return self.starts[piece] + copy * self.pieces[piece].length + offset
        return self.starts[piece] + offset


# How an allocation's partner follows from its own copy c (of m) and the partner run's copy count m2, where the
# partner's run gains r copies per copy of the own one (its layer's block repeats a shorter one r times more):
# into a run, the partner's copy is r c + d ("same"), counted from the ends (m2 - r (m - c) + d, "same_end"),
# mirrored (m2 - 1 - r c + d, "mirror"; r (m - 1 - c) + d, "mirror_own"), or fixed (d, "first"; m2 - 1 - d, "last");
# into a fixed piece, always ("fixed") or only from one copy (c == d, "at_first"; c == m - 1 - d, "at_last").
_INTO_RUN = ("same", "same_end", "mirror", "mirror_own", "first", "last")
_INTO_FIXED = ("at_first", "at_last", "fixed")

Rule = tuple[int, int, str, int, int]  # the partner's piece and offset, the form, its constant, r


def _copy(form: str, c: int, m: int, m2: int, r: int) -> int:
    """The partner's copy by ``form`` before its constant is added."""
    return {"same": r * c, "same_end": m2 - r * (m - c), "mirror": m2 - 1 - r * c, "mirror_own": r * (m - 1 - c),
            "first": 0, "last": m2 - 1}[form]


def _ratios(layout: _Layout, piece: int, p2: int) -> tuple[int, ...]:
    """The candidate r between two runs: 1, and the partner's copies per layer over the own run's."""
    own, other = layout.pieces[piece].per_layer, layout.pieces[p2].per_layer
    if not own or not other:
        return (1,)
    return (1,) if other == own or other % own else (1, other // own)


def _constant(form: str, c: int, m: int, c2: int, m2: int, r: int) -> int | None:
    """The constant of ``form`` that puts copy ``c`` of ``m``'s partner at copy ``c2`` of ``m2``."""
    if form == "fixed":
        return 0
    if form == "at_first":
        return c if c >= 0 else None
    if form == "at_last":
        return m - 1 - c if c >= 0 else None
    if form == "first":
        return c2
    if form == "last":
        return m2 - 1 - c2
    if c < 0:
        return None
    return c2 - _copy(form, c, m, m2, r)


def _target(rule: Rule, piece: int, c: int, layout: _Layout) -> int | None:
    """The position ``rule`` gives copy ``c`` of ``piece`` in ``layout``, or ``None`` where it does not apply."""
    p2, o2, form, d, r = rule
    m, m2 = layout.copies[piece], layout.copies[p2]
    if form in _INTO_FIXED:
        if (form == "at_first" and c != d) or (form == "at_last" and c != m - 1 - d):
            return None
        return layout.position(p2, -1, o2)
    return layout.position(p2, m2 - 1 - d if form == "last" else _copy(form, c, m, m2, r) + d, o2)


def _fit(piece: int, occurrences: list[tuple[_Layout, int, int, int, int, int]], forms: Sequence[str]) -> Rule | None:
    """The first of ``forms`` whose one constant gives every ``(layout, c, m, c2, piece2, offset2)``."""
    layout, _, _, _, p2, o2 = occurrences[0]
    for r in _ratios(layout, piece, p2):
        for form in forms:
            constants = {_constant(form, c, m, c2, lay.copies[p2], r) for lay, c, m, c2, _, _ in occurrences}
            d = constants.pop() if len(constants) == 1 else None
            if d is not None:
                return (p2, o2, form, d, r)
    return None


def _rules(layouts: list[_Layout], samples: list[_Canonical]) -> dict[tuple[int, int], list[Rule]] | None:
    """For each allocation site (piece, offset): the rules that give its free's position in every sample (see the
    module docstring, step 3), tried in order; none applies: never freed. ``None`` where no such rules hold
    (:func:`_partners` checks them against the samples)."""
    seen: dict[tuple[int, int], dict[tuple[int, int] | None, list[tuple[_Layout, int, int, int, int, int]]]] = {}
    for layout, sample in zip(layouts, samples, strict=True):
        for pos, token in enumerate(sample.tokens):
            if token < 0:
                continue
            piece, c, offset = layout.where[pos]
            other = sample.partner[pos]
            groups = seen.setdefault((piece, offset), {})
            if other < 0:
                groups.setdefault(None, []).append((layout, c, layout.copies[piece], -1, -1, -1))
                continue
            p2, c2, o2 = layout.where[other]
            groups.setdefault((p2, o2), []).append((layout, c, layout.copies[piece], c2, p2, o2))
    rules: dict[tuple[int, int], list[Rule]] = {}
    for site, groups in seen.items():
        found: list[Rule] = []
        for target, occurrences in groups.items():
            if target is None:
                continue
            into_run = layouts[0].pieces[target[0]].is_run
            forms = _INTO_RUN if into_run else _INTO_FIXED if len(groups) > 1 else ("fixed",)
            rule = _fit(site[0], occurrences, forms)
            if rule is None:
                logger.debug("layer samples' traces: no rule for site %s: %s", site,
                             {t: [(c, m, c2) for _, c, m, c2, _, _ in o] for t, o in groups.items()})
                return None
            found.append(rule)
        # the rules that limit themselves first: into runs, from one copy, then always
        found.sort(key=lambda r: 0 if r[2] in _INTO_RUN else 1 if r[2] != "fixed" else 2)
        rules[site] = found
    return rules


def _partners(layout: _Layout, rules: dict[tuple[int, int], list[Rule]]) -> list[int] | None:
    """Every event's partner in ``layout`` by ``rules``; ``None`` where they do not make a valid trace."""
    partner = [-1] * len(layout.tokens)
    for pos, token in enumerate(layout.tokens):
        if token < 0:
            continue
        piece, c, offset = layout.where[pos]
        other = next((t for t in (_target(r, piece, c, layout) for r in rules.get((piece, offset), ())) if t is not None), None)
        if other is None:
            continue
        if other <= pos or layout.tokens[other] != -token or partner[other] != -1:
            return None
        partner[pos], partner[other] = other, pos
    if any(p < 0 for p, t in zip(partner, layout.tokens, strict=True) if t < 0):
        return None
    return partner


@dataclass(frozen=True)
class Proof:
    """What three consecutive samples of one shape showed: the top sample's cut into pieces (positions, block
    lengths, copies) and the lifetime rules that gave back every sample exactly (:func:`whole_trace`)."""

    pieces: tuple[_Piece, ...]
    rules: dict[tuple[int, int], list[Rule]]
    top_layers: int
    top: tuple[int, ...] = field(default=(), compare=False)  # the top sample's tokens (:func:`_recut` aligns on them)


class Periodicity:
    """A holder for one question's :class:`Proof` s: each simulation given it that ran three samples adds theirs,
    and later simulations of the same model, step and device at other batch sizes and lengths (the fit search's)
    run two samples only where those two are written by one of them (:func:`whole_trace_from`); the caller keeps
    one holder per model, dtype, mode, recipe and device (a mutable holder, not a value: the simulations fill it).
    Several, because a shape can change the program (Llama-3.1-8B LoRA: batch 2 allocates two events more than
    batch 1, once): the search's later shapes are then written by the proof of an earlier one."""

    def __init__(self) -> None:
        self.proofs: list[Proof] = []


def _written(pieces: list[_Piece], top: list[int], top_layers: int, rules: dict[tuple[int, int], list[Rule]],
             n_layers: int) -> list[Event] | None:
    whole = _Layout(pieces, top, top_layers - n_layers)
    partner = _partners(whole, rules)
    if partner is None:
        return None
    return [(pos if token > 0 else partner[pos], token if token > 0 else -1) for pos, token in enumerate(whole.tokens)]


def prove(samples: Sequence[Sequence[Event]], sizes: Sequence[int]) -> Proof | None:
    """The pieces and rules that give back the traces of ``sizes`` (three consecutive layer counts) exactly, or
    ``None`` where the samples are not exactly periodic in the layers (see the module docstring)."""
    if len(samples) != 3 or len(sizes) != 3 or list(sizes) != list(range(sizes[0], sizes[0] + 3)):
        return None
    found = [canonical(s) for s in samples]
    inserted = _insertions(found[1].tokens, found[2].tokens)
    if inserted is None:
        logger.info("layer samples' traces: no repeated block found")
        return None
    top = found[2].tokens
    for shortest in (False, True):
        pieces = _pieces(top, inserted, sizes[-1] - sizes[0], shortest)
        if pieces is None:
            logger.info("layer samples' traces: the repeated blocks overlap or repeat too few times")
            continue
        layouts = [_Layout(pieces, top, sizes[-1] - k) for k in sizes]
        if any(layout.tokens != sample.tokens for layout, sample in zip(layouts, found, strict=True)):
            logger.info("layer samples' traces: not periodic in the layers")
            continue
        rules = _rules(layouts, found)
        if rules is None or any(_partners(layout, rules) != sample.partner for layout, sample in zip(layouts, found, strict=True)):
            logger.info("layer samples' traces: lifetimes not periodic in the layers")
            continue
        return Proof(tuple(pieces), rules, sizes[-1], tuple(top))
    return None


def whole_trace(samples: Sequence[Sequence[Event]], sizes: Sequence[int], n_layers: int) -> list[Event] | None:
    """The trace of ``n_layers`` layers from the traces of ``sizes`` (three consecutive layer counts), or ``None``
    where the samples are not exactly periodic in the layers (see the module docstring)."""
    if n_layers < sizes[-1]:
        return None
    proof = prove(samples, sizes)
    if proof is None:
        return None
    return written_from(proof, samples[-1], n_layers)


def written_from(proof: Proof, top: Sequence[Event], n_layers: int) -> list[Event] | None:
    """The trace of ``n_layers`` layers written from the proof's own top sample ``top``."""
    return _written(list(proof.pieces), canonical(top).tokens, proof.top_layers, proof.rules, n_layers)


def whole_trace_from(proof: Proof, samples: Sequence[Sequence[Event]], sizes: Sequence[int], n_layers: int) -> list[Event] | None:
    """The trace of ``n_layers`` layers from two samples (``sizes``: the proof's top layer count and the one below)
    of another shape of the same model and step, where ``proof``'s pieces and rules give both back exactly, every
    token and every partner; ``None`` otherwise (the caller then runs the third sample).

    Why two suffice there: the top sample's tokens must be copies of one block per run at the proof's positions
    (every layer of it alike, in sizes, at this shape: a layer that differs, as a sliding window's past the
    sequence in some layers only, breaks it), and one layer less must drop exactly one copy of each; the
    lifetimes must follow the proof's rules in both. The rules are affine in the copy and the copy count, and
    the copies of the two samples (``m - 1`` and ``m`` of each run) are not on one line, so a rule that gives
    both back is the one rule that fits them; what the third sample would add is that one layer less again
    drops one copy, which the proof's shape showed for the same code path (the same pieces, so the same ops
    per layer and the same fixed parts). A shape that changes the program (another attention kernel, a
    workspace, a window, routing) changes the pieces or their tokens and falls back."""
    if len(samples) != 2 or list(sizes) != [proof.top_layers - 1, proof.top_layers] or n_layers < proof.top_layers:
        return None
    found = [canonical(s) for s in samples]
    pieces = list(proof.pieces)
    top = found[1].tokens
    if sum(p.length * max(p.copies, 1) for p in pieces) != len(top):
        return None
    layouts = [_Layout(pieces, top, proof.top_layers - k) for k in sizes]
    if any(layout.tokens != sample.tokens or _partners(layout, proof.rules) != sample.partner
           for layout, sample in zip(layouts, found, strict=True)):
        logger.info("layer samples' traces: not written by the proof's pieces and rules at this shape")
        return None
    return _written(pieces, top, proof.top_layers, proof.rules, n_layers)


def whole_trace_from_one(proof: Proof, sample: Sequence[Event], size: int, n_layers: int, labels: Sequence[str],
                         ) -> tuple[list[Event], list[str | None]] | None:
    """The trace of ``n_layers`` layers from one sample (``size``: one layer less than the proof's top) of another
    shape of the same model and step, where ``proof``'s pieces and rules give it back exactly, every token and every
    partner, and what its records hold (``labels``, by event key) is the same in every copy of a run but its first and
    last; with the label of each of the written trace's allocations (by its key; ``None`` at a free), a run's first and
    last copies taking the sample's first and last copies' labels, the others its second's. ``None`` otherwise (the
    caller runs the proof's top sample).

    The sample's tokens are cut by the proof's pieces (a fixed piece's length, then each run's ``m`` copies of its
    block, ``m`` the proof's copies one layer less, at least two): every copy must be its run's first, token for
    token (every layer alike in sizes at this shape), and the proof's rules must give back every lifetime. Why one
    sample suffices where the proof's shape showed three: the pieces hold the same ops in the same order at both
    shapes (only sizes differ: the tokens are this shape's own, copied from this sample), so what a layer more or
    less adds or drops (one block per run, the lifetimes' dependence on the copy counts) is the proof's, seen there
    for the same code; and with at least two copies of every run here, a rule that gives them all back is the
    proof's rule at this shape's copies too. A shape that changes the program (another kernel, a workspace, a
    window, routing, an event more at one batch size) changes the pieces or their tokens and falls back; so do middle
    copies that hold different things."""
    if size != proof.top_layers - 1 or n_layers < proof.top_layers:
        return None
    found = canonical(sample)
    written = _from_one(list(proof.pieces), proof.rules, proof.top_layers, found, n_layers, labels)
    if written is not None:
        return written
    candidates = [w for w in (_from_one(*c, proof.top_layers, found, n_layers, labels) for c in _recut(proof, found)) if w is not None]
    if not candidates or any(w != candidates[0] for w in candidates[1:]):
        return None
    return candidates[0]


def _recut(proof: Proof, found: _Canonical) -> list[tuple[list[_Piece], dict[tuple[int, int], list[Rule]]]]:
    """The proof's pieces and rules with the events that ``found`` (one layer less than the proof's top, at another
    shape) has more in its fixed pieces, in every way they can be found (none: an empty list): a few allocations (at
    most :data:`_MORE` events in all) each freed within the same fixed piece, or one allocation and its free in two
    fixed pieces (:func:`_pair_ways`). Removing them leaves the pieces' own events, in sign and in their lifetimes
    within the piece, and every run its copies alike (where several events alike could be the ones more, each way
    is a candidate, and the caller takes the written trace only where every candidate that gives the sample back
    writes the same one): a step that copies a tensor at this shape where it took a view at the proof's (Llama's
    shifted labels at batch 2, not at batch 1), outside the layers, so the same in every layer count (with
    gradient checkpointing the copy lives across the frees of the layers' checkpoints, a run between its two fixed
    pieces). The runs and every other rule are the proof's (offsets moved past the events more);
    :func:`whole_trace_from_one` then checks the sample against them, token and partner."""
    if not proof.top:
        return []
    pieces = list(proof.pieces)
    before = _Layout(pieces, list(proof.top), 1)
    extra = len(found.tokens) - len(before.tokens)
    if extra <= 0 or extra % 2 or extra > _MORE:
        return []
    partner = _partners(before, proof.rules)
    if partner is None:
        return []
    ways: list[list[tuple[int, list[int], list[int]]]] = []  # per host piece: (host, its events' new offsets, the events more)
    for host, piece in enumerate(pieces):
        if piece.is_run:
            continue
        recut = [_Piece(0, p.length + (extra if i == host else 0), p.copies, p.per_layer) for i, p in enumerate(pieces)]
        layout = _Layout(recut, [0] * sum(p.length * max(p.copies, 1) for p in recut), 1)  # positions only
        start = layout.starts[host]
        if any(found.tokens[layout.position(i, c, o) or 0] != found.tokens[layout.position(i, 0, o) or 0]
               for i, p in enumerate(recut) if p.is_run for c in range(layout.copies[i]) for o in range(p.length)):
            continue
        old_start = before.starts[host]
        pairs = [o for o in range(piece.length + extra) if found.tokens[start + o] > 0
                 and start <= found.partner[start + o] < start + piece.length + extra]
        if comb(len(pairs), extra // 2) > _WAYS:  # too many to try: the shape runs the 4-layer sample
            continue
        for chosen in combinations(pairs, extra // 2):
            more = sorted({*chosen, *(found.partner[start + o] - start for o in chosen)})
            if len(more) != extra:
                continue
            own = [o for o in range(piece.length + extra) if o not in more]
            if any((found.tokens[start + n] > 0) != (before.tokens[old_start + o] > 0) for o, n in enumerate(own)):
                continue
            inside = {o: partner[old_start + o] - old_start for o in range(piece.length)
                      if 0 <= partner[old_start + o] - old_start < piece.length}
            if all(found.partner[start + own[o]] == start + own[q] for o, q in inside.items()):
                ways.append([(host, own, more)])
    if extra == 2:
        ways += _pair_ways(before, found)
    return [_recut_as(proof, found, way) for way in ways]


def _pair_ways(before: _Layout, found: _Canonical) -> list[list[tuple[int, list[int], list[int]]]]:
    """The ways of :func:`_recut` with one allocation more and its free (``found`` two events longer than ``before``,
    the proof's layout one layer less): an allocation ``a`` freed at ``f`` whose removal leaves ``before``'s signs
    (allocation or free) event for event, each of the two in another fixed piece (where it sits between two pieces,
    the fixed one), as ``(host, own offsets, offsets more)`` per host piece. Only signs are compared here (this shape's
    sizes differ); the caller checks tokens and lifetimes."""
    sb = [t > 0 for t in before.tokens]
    sf = [t > 0 for t in found.tokens]
    n = len(sb)
    if len(sf) != n + 2:
        return []
    prefix = next((i for i, (x, y) in enumerate(zip(sb, sf, strict=False)) if x != y), n)  # sf[:a] == sb[:a] iff a <= prefix
    suffix = next((k for k in range(n) if sb[n - 1 - k] != sf[n + 1 - k]), n)  # sf[n+2-k:] == sb[n-k:] iff k <= suffix
    shifted = [0]  # mismatches of sf[i + 1] against sb[i] below i
    for i in range(n):
        shifted.append(shifted[-1] + (sf[i + 1] != sb[i]))

    def hosts(slot: int) -> list[int]:
        """The fixed pieces an event more may belong to that sits just before ``before``'s position ``slot``."""
        near = {before.where[q][0] for q in (slot - 1, slot) if 0 <= q < n}
        return sorted(p for p in near if not before.pieces[p].is_run)

    ways = []
    for a in range(min(prefix, n) + 1):
        f = found.partner[a]
        if found.tokens[a] < 0 or f < 0 or n + 1 - f > suffix or shifted[f - 1] - shifted[a]:
            continue
        for host_a in hosts(a):
            for host_f in hosts(f - 1):
                if host_f <= host_a:  # one host: :func:`_recut`'s own search
                    continue
                start_a = before.starts[host_a]
                start_f = before.starts[host_f] + 1  # past the allocation more
                length_a, length_f = before.pieces[host_a].length + 1, before.pieces[host_f].length + 1
                ways.append([(host_a, [o for o in range(length_a) if o != a - start_a], [a - start_a]),
                             (host_f, [o for o in range(length_f) if o != f - start_f], [f - start_f])])
    return ways


def _recut_as(proof: Proof, found: _Canonical, way: list[tuple[int, list[int], list[int]]],
              ) -> tuple[list[_Piece], dict[tuple[int, int], list[Rule]]]:
    """The pieces and rules of one way of :func:`_recut`: ``(host piece, its own events' offsets, the events more)``
    per host."""
    hosts = {host: (own, more) for host, own, more in way}

    def moved(piece: int, offset: int) -> int:
        return hosts[piece][0][offset] if piece in hosts else offset

    recut = []
    at = 0
    for i, p in enumerate(proof.pieces):
        recut.append(_Piece(at, p.length + (len(hosts[i][1]) if i in hosts else 0), p.copies, p.per_layer))
        at += recut[-1].length * max(p.copies, 1)
    rules = {(p, moved(p, o)): [(p2, moved(p2, o2), form, d, r) for p2, o2, form, d, r in site]
             for (p, o), site in proof.rules.items()}
    layout = _Layout(recut, [0] * at, 1)
    where = {layout.starts[host] + o: (host, o) for host, (_, more) in hosts.items() for o in more}
    for position, (host, o) in where.items():
        if found.tokens[position] > 0:
            other = where.get(found.partner[position])
            if other is not None:
                rules[(host, o)] = [(other[0], other[1], "fixed", 0, 1)]
    return recut, rules


_MORE = 4  # the most events more a shape's fixed piece may have than the proof's (:func:`_recut`)
_WAYS = 4096  # the most ways of choosing them tried in one piece


def _from_one(pieces: list[_Piece], rules: dict[tuple[int, int], list[Rule]], top_layers: int, found: _Canonical,
              n_layers: int, labels: Sequence[str]) -> tuple[list[Event], list[str | None]] | None:
    """:func:`whole_trace_from_one` with the pieces and rules given."""
    top: list[int] = []
    at = 0
    for piece in pieces:
        if piece.start != len(top):
            return None
        block = found.tokens[at:at + piece.length]
        if len(block) != piece.length:
            return None
        if not piece.is_run:
            top += block
            at += piece.length
            continue
        copies = piece.copies - piece.per_layer
        if copies < 2:
            return None
        top += block * piece.copies
        at += piece.length * copies
    if at != len(found.tokens):
        return None
    layout = _Layout(pieces, top, 1)
    if layout.tokens != found.tokens or _partners(layout, rules) != found.partner:
        logger.info("one layer sample's trace: not written by the proof's pieces and rules at this shape")
        return None

    label = [labels[key] if key >= 0 else None for key in found.keys]

    def source(piece: int, c: int, m: int, offset: int) -> int:
        """The sample's position whose label copy ``c`` of ``m`` takes: a fixed piece's own; a run's first, last or
        (any other) second copy, where the sample has three or more (the first and last layers' records may hold
        other things: the last layer's output kept); else its first."""
        if not pieces[piece].is_run:
            c = -1
        elif layout.copies[piece] < 3 or c == 0:
            c = 0
        else:
            c = layout.copies[piece] - 1 if c == m - 1 else 1
        position = layout.position(piece, c, offset)
        assert position is not None
        return position

    if any(label[pos] != label[source(piece, c, layout.copies[piece], offset)] for pos, (piece, c, offset) in enumerate(layout.where)):
        logger.info("one layer sample's trace: a run's middle copies hold different components")
        return None
    whole = _Layout(pieces, top, top_layers - n_layers)
    partner = _partners(whole, rules)
    if partner is None:
        return None
    events = [(pos if token > 0 else partner[pos], token if token > 0 else -1) for pos, token in enumerate(whole.tokens)]
    return events, [label[source(piece, c, whole.copies[piece], offset)] for piece, c, offset in whole.where]
