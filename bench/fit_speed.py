"""Benchmark: an answer with a GPU chosen (fits?, largest batch, longest sequence) against the same answer with none.

Run from the repository root: ``python -m bench.fit_speed [--repeat 1] [--unguided]``. The models are the bundled
catalog copies of their Hub configs (local folders, no network; answers are not cached for local folders). The
first call warms the process (imports, meta kernels). For each case, in one run: the answer with no GPU chosen (its
layers simulated in part and extrapolated), the same answer with the GPU chosen (the same 2-, 3- and 4-layer samples,
the caching allocator replayed over the whole model's trace written from theirs, :mod:`estimator.peak.sim.layer_trace`;
then the largest batch and the longest sequence searched the same way, :mod:`estimator.fit.plan`), their ratio, the
simulations the GPU answer ran, the process's CPU time, and ``os.getloadavg()`` before and after (the machine is
shared: wall times move with the load, CPU times and ratios less). ``--unguided`` also times the
search without its first guess, and with three layer samples at every shape (the search's shapes otherwise run
two where the row's three proved the trace's periodicity, :func:`~estimator.peak.sim.layer_trace.whole_trace_from`),
to show what they save; both must give the same answer (checked). Results go to bench/results/fit_speed.md (target: under 5 s warm). ``--smoke``: a 2-layer
Llama, one GPU, inference, one round, 128 tokens, nothing written.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CATALOG = ROOT / "estimator/source/catalog/data"
# (label, catalog folder, mode, seq_len, GPU, other options): the slow answers
CASES: list[tuple[str, str, str, int, str, dict[str, Any]]] = [
    ("Llama-3.1-8B inference x 8192", "meta-llama__Llama-3.1-8B", "inference", 8192, "RTX 4090", {}),
    ("Llama-3.1-8B inference x 8192", "meta-llama__Llama-3.1-8B", "inference", 8192, "L4", {}),
    ("Llama-3.1-8B LoRA r16 x 512", "meta-llama__Llama-3.1-8B", "training", 512, "RTX 4090", {"lora_rank": 16}),
    ("Llama-3.1-8B LoRA r16 x 2048, checkpointing", "meta-llama__Llama-3.1-8B", "training", 2048, "RTX 4090",
     {"lora_rank": 16, "gradient_checkpointing": True}),
    ("Mistral-7B LoRA r16 x 512", "mistralai__Mistral-7B-v0.1", "training", 512, "L4", {"lora_rank": 16}),
]


def _load() -> str:
    return "/".join(f"{v:.1f}" for v in os.getloadavg())


def _timed(model: str, **kwargs: Any) -> tuple[float, Any]:
    seconds, _cpu, row = _clocked(model, **kwargs)
    return seconds, row


def _clocked(model: str, **kwargs: Any) -> tuple[float, float, Any]:
    """Wall seconds, this process's CPU seconds, and the first row."""
    from estimator import estimate

    t0, c0 = time.perf_counter(), time.process_time()
    row = estimate(model, dtypes="bfloat16", **kwargs).rows[0]
    return time.perf_counter() - t0, time.process_time() - c0, row


def _simulations(row: Any) -> int:
    """Whole-model simulations of a GPU answer: the row's own, then the two searches'."""
    fit = row.fit or {}
    return 1 + sum(fit.get(k, {}).get("simulations", 0) for k in ("batch_boundary", "seq_boundary"))


def main(argv: list[str] | None = None) -> int:
    from bench._smoke import SMOKE_HELP, tiny_llama_folder
    from estimator import estimate
    from estimator.fit import plan
    from estimator.peak.sim import layers

    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--unguided", action="store_true", help="also time the search without its first guess")
    ap.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = ap.parse_args(argv)
    cases = CASES
    if args.smoke:
        cases, args.repeat = [("tiny llama inference x 128", str(tiny_llama_folder()), "inference", 128, "L4", {})], 1
    estimate(str(CATALOG / "meta-llama__Llama-3.1-8B") if not args.smoke else cases[0][1], mode="inference", dtypes="bfloat16",
             seq_len=128)  # warm-up
    lines = ["| case | GPU | no GPU (s) | GPU chosen (s) | GPU chosen, CPU (s) | ratio | simulations | how | max batch | max seq "
             "| peak bytes | load before/after |" + (" unguided (s) | unguided simulations |" if args.unguided else ""),
             "|---|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---|" + ("---:|---:|" if args.unguided else "")]
    for label, folder, mode, seq_len, gpu, extra in cases:
        model = folder if args.smoke else str(CATALOG / folder)
        for _ in range(args.repeat):
            before = _load()
            plain, _row = _timed(model, mode=mode, seq_len=seq_len, **extra)
            chosen, cpu, row = _clocked(model, mode=mode, seq_len=seq_len, gpu=gpu, **extra)
            fit = row.fit
            assert fit is not None
            how = "layer samples" if any("written from the samples'" in n for n in row.notes) else "whole model"
            line = (f"| {label} | {gpu} | {plain:.1f} | {chosen:.1f} | {cpu:.1f} | {chosen / plain:.1f} | {_simulations(row)} | {how} "
                    f"| {fit['max_batch_size']} | {fit['max_seq_len']} | {row.peak_bytes:,} | {before} / {_load()} |")
            if args.unguided:
                guess, seq_guess, one, two = plan._guess, plan._seq_guess, layers._from_one, layers._from_two
                plan._guess = plan._seq_guess = lambda *a, **k: None  # type: ignore[assignment]  # the search without its guesses
                layers._from_one = layers._from_two = lambda *a, **k: None  # and every shape with its three layer samples
                try:
                    old, old_row = _timed(model, mode=mode, seq_len=seq_len, gpu=gpu, **extra)
                finally:
                    plan._guess, plan._seq_guess, layers._from_one, layers._from_two = guess, seq_guess, one, two
                same = (old_row.peak_bytes, old_row.fit["max_batch_size"], old_row.fit["max_seq_len"], old_row.fit["needed_bytes"])
                assert same == (row.peak_bytes, fit["max_batch_size"], fit["max_seq_len"], fit["needed_bytes"]), (same, fit)
                line += f" {old:.1f} | {_simulations(old_row)} |"
            lines.append(line)
            print(line, flush=True)
    if args.smoke:
        return 0
    out = ROOT / "bench/results/fit_speed.md"
    out.write_text("# Fit answer speed: a GPU chosen against none (bfloat16, batch 1)\n\n"
                   f"Command: `python -m bench.fit_speed{' --unguided' if args.unguided else ''}` ({os.cpu_count()} CPUs, shared with "
                   "other sessions: the load averages (1/5/15 min) are recorded beside each case; the CPU time and the ratio "
                   "move less than the wall seconds). Simulations: the GPU answer's simulations (its row, then the batch and "
                   "sequence searches), the row's of the 2-, 3- and 4-layer samples, the search's of the 3- and 4-layer "
                   "samples where the row's pieces and lifetimes write both exactly (else all three), the allocator "
                   "replayed over the whole model's trace written from theirs ('layer samples'; 'whole model' where the "
                   "samples were not periodic). The unguided columns are the same search without its first guess (each "
                   "prediction still simulated with its neighbour) and with three samples at every shape: same answers, "
                   "checked.\n\n" + "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
