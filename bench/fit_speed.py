"""Benchmark: a fit answer for Llama-3.1-8B on one GPU (fits?, largest batch, longest sequence).

Run from the repository root: ``python -m bench.fit_speed [--gpu L4] [--mode inference] [--repeat 2]``.
The model is the bundled catalog copy of meta-llama/Llama-3.1-8B's config (a local folder, no
network). The first call warms the process (imports, meta kernels); each timed call is a fresh
``estimate(..., gpu=...)`` at batch 1 x 2048 in bfloat16 (answers are not cached for local folders),
which simulates the row and then searches both boundaries with fresh simulations.
Results go to bench/results/fit_speed.md (target: under 5 s warm). ``--smoke``: a 2-layer Llama, one GPU, inference,
one round, 128 tokens, nothing written.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "estimator/source/catalog/data/meta-llama__Llama-3.1-8B"


def main(argv: list[str] | None = None) -> int:
    from bench._smoke import SMOKE_HELP, tiny_llama_folder
    from estimator import estimate

    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", nargs="+", default=["L4", "A100 80GB", "H100 80GB"])
    ap.add_argument("--modes", nargs="+", default=["inference", "training"])
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = ap.parse_args(argv)
    model, seq_len = MODEL, 2048
    if args.smoke:
        model, seq_len, args.gpus, args.modes, args.repeat = tiny_llama_folder(), 128, ["L4"], ["inference"], 1
    estimate(str(model), mode="inference", dtypes="bfloat16", seq_len=min(512, seq_len))  # warm-up
    lines = ["| mode | GPU | fits | max batch | max seq | simulations | warm seconds (each run) |", "|---|---|---|---:|---:|---:|---|"]
    for mode in args.modes:
        extra = {"lora_rank": 16} if mode == "training" else {}
        for gpu in args.gpus:
            times, row = [], None
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                row = estimate(str(model), mode=mode, dtypes="bfloat16", seq_len=seq_len, gpu=gpu, **extra).rows[0]
                times.append(time.perf_counter() - t0)
            assert row is not None and row.fit is not None
            fit = row.fit
            sims = sum(fit.get(k, {}).get("simulations", 0) for k in ("batch_boundary", "seq_boundary"))
            lines.append(f"| {mode}{' LoRA r16' if extra else ''} | {gpu} | {fit['fits']} | {fit['max_batch_size']} | {fit['max_seq_len']} "
                         f"| {sims} | {', '.join(f'{t:.1f}' for t in times)} |")
            print(lines[-1], flush=True)
    if args.smoke:
        return 0
    out = ROOT / "bench/results/fit_speed.md"
    out.write_text("# Fit answer speed: Llama-3.1-8B, bfloat16, batch 1 x 2048\n\n"
                   f"Command: `python -m bench.fit_speed` ({os.cpu_count()} CPUs; other sessions may have shared them).\n\n"
                   + "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
