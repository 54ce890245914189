"""How many GPUs of one kind a use needs: the fewest that fit, and the figure per GPU at that count.

Pure: :func:`fewest_gpus` asks a ``trial`` function for the figure per GPU at a count of GPUs
(one per-GPU estimate: the parallel simulation of ``estimator.peak.parallel`` for training under a
strategy or inference under tensor parallelism, vLLM's per-rank plan of ``estimator.serving`` for
serving; :mod:`estimator.gpu_count` builds it over :func:`estimator.estimate`) and returns the first
count of :func:`counts` whose figure fits, with every count it tried.

The counts tried are the ones people deploy: 1, 2, 4, 8 GPUs in one node, then whole nodes of 8
(16, 32, 64). They are tried in that order, so the answer is the fewest of them that fits whatever
the shape of the figure per GPU (no monotonicity is assumed), and the count tried before it is
shown not to fit (or to have no figure). DDP keeps the whole model on every GPU: more GPUs never
lower its figure per GPU, so only 1 and 2 are tried and the answer says so.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from estimator.units import format_bytes

__all__ = ["DDP_NOTE", "GPU_PER_NODE", "MAX_GPUS", "GPUCount", "Trial", "counts", "fewest_gpus", "layout"]

GPU_PER_NODE = 8  # a node's GPUs (DGX/HGX): tensor parallelism stays within one
MAX_GPUS = 64  # the most GPUs asked about
DDP_NOTE = "DDP keeps the whole model on every GPU: more GPUs do not lower the figure per GPU (choose zero3 or fsdp to split it)"


@dataclass(frozen=True)
class Trial:
    """One count of GPUs: the bytes needed per GPU (``None``: no figure, ``reason`` says why) against the
    GPU's ``capacity_bytes``, or, where the use decides it itself (vLLM starts or not), ``verdict``."""

    gpus: int
    needed_bytes: int | None
    capacity_bytes: int
    layout: str  # "fsdp over 4 GPUs", "tensor parallel 2 x pipeline parallel 1"
    reason: str | None = None
    verdict: bool | None = None  # a use's own verdict (serving: one request of max model length fits); None: compare bytes
    details: dict[str, Any] = field(default_factory=dict)  # what else the use says per GPU (serving: KV tokens, concurrency)

    @property
    def fits(self) -> bool:
        if self.verdict is not None:
            return self.verdict and (self.needed_bytes is None or self.needed_bytes <= self.capacity_bytes)
        return self.needed_bytes is not None and self.needed_bytes <= self.capacity_bytes


@dataclass(frozen=True)
class GPUCount:
    """The fewest GPUs that fit (``gpus``; ``None``: none of the counts tried), and every trial, by count."""

    gpu: str
    capacity_bytes: int
    trials: tuple[Trial, ...]
    note: str = ""

    @property
    def answer(self) -> Trial | None:
        return next((t for t in self.trials if t.fits), None)

    @property
    def gpus(self) -> int | None:
        found = self.answer
        return None if found is None else found.gpus

    @property
    def below(self) -> Trial | None:
        """The trial of the count tried just before the answer (it does not fit), if any."""
        found = self.answer
        earlier = [t for t in self.trials if found is not None and t.gpus < found.gpus]
        return earlier[-1] if earlier else None

    def sentence(self, dtype: str) -> str:
        """One dtype's answer in words: ``"bfloat16: 4 × RTX 4090 (fsdp over 4 GPUs): 20.10 GiB per GPU (× 4) of 23.52 GiB;
        2 do not fit (30.20 GiB)."`` (the page and the CLI's ``--count-gpus`` say it so)."""
        answer = self.answer
        if answer is None:
            last = self.trials[-1]
            return (f"{dtype}: no count up to {last.gpus} {self.gpu} fits ({last.layout}: {_per_gpu(last, last.gpus)})"
                    + (f". {self.note}" if self.note == DDP_NOTE else "") + ".")
        text = f"{dtype}: {answer.gpus} × {self.gpu} ({answer.layout}): {_per_gpu(answer, answer.gpus)}"
        below = self.below
        if below is not None:
            shown = format_bytes(below.needed_bytes) if below.needed_bytes is not None else (below.reason or "vLLM does not start")
            text += f"; {below.gpus} {'does' if below.gpus == 1 else 'do'} not fit ({shown})"
        method = answer.details.get("method")
        if method and method != "simulated":
            text += f" [method {method}: not simulated, see the notes]"
        return text + "."

    def to_dict(self) -> dict[str, Any]:
        return {"gpu": self.gpu, "capacity_bytes": self.capacity_bytes, "gpus": self.gpus, "note": self.note,
                "trials": [{"gpus": t.gpus, "needed_bytes": t.needed_bytes, "fits": t.fits, "layout": t.layout,
                            "reason": t.reason, **t.details} for t in self.trials]}


def _per_gpu(trial: Trial, n: int) -> str:
    if trial.details.get("kv_cache_tokens") is not None:  # serving: vLLM's plan per GPU
        tokens, concurrency, length = (trial.details.get(k) for k in ("kv_cache_tokens", "max_concurrency", "max_model_len"))
        return (f"{tokens:,} tokens of KV cache per GPU (× {n}), {concurrency:,.2f} requests of {length:,} tokens at once"
                if isinstance(tokens, int) and isinstance(concurrency, (int, float)) and isinstance(length, int) else "vLLM starts")
    if trial.needed_bytes is None:
        return trial.reason or "no figure"
    return f"{format_bytes(trial.needed_bytes)} per GPU (× {n}) of {format_bytes(trial.capacity_bytes)}"


def counts(limit: int = MAX_GPUS, per_node: int = GPU_PER_NODE) -> tuple[int, ...]:
    """``1, 2, 4, 8`` GPUs in one node, then whole nodes (``16, 32, 64``), up to ``limit``."""
    found: list[int] = []
    n = 1
    while n <= min(limit, per_node):
        found.append(n)
        n *= 2
    n = per_node * 2
    while n <= limit:
        found.append(n)
        n *= 2
    return tuple(found)


def layout(n: int, per_node: int = GPU_PER_NODE) -> tuple[int, int]:
    """``n`` GPUs as (GPUs per node, nodes): ``4 -> (4, 1)``, ``16 -> (8, 2)``."""
    return (n, 1) if n <= per_node else (per_node, -(-n // per_node))


def fewest_gpus(trial: Callable[[int], Trial], gpu: str, capacity_bytes: int, tried: Iterable[int] | None = None,
                note: str = "") -> GPUCount:
    """Ask ``trial`` for each count of ``tried`` (default :func:`counts`), in order, until one fits."""
    done: list[Trial] = []
    for n in tried if tried is not None else counts():
        found = trial(n)
        done.append(found)
        if found.fits:
            break
    return GPUCount(gpu=gpu, capacity_bytes=capacity_bytes, trials=tuple(done), note=note)
