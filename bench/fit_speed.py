"""Benchmark: a fit answer for Llama-3.1-8B on one GPU (fits?, largest batch, longest sequence).

Run from the repository root: ``python -m bench.fit_speed [--gpu L4] [--mode inference] [--repeat 2]``.
The model is the bundled catalog copy of meta-llama/Llama-3.1-8B's config (a local folder, no
network). The first call warms the process (imports, meta kernels); each timed call is a fresh
``estimate(..., gpu=...)`` at batch 1 x 2048 in bfloat16 (answers are not cached for local folders),
which simulates the row and then searches both boundaries with fresh simulations.
Results go to bench/results/fit_speed.md (target: under 5 s warm).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "estimator/source/catalog/data/meta-llama__Llama-3.1-8B"


def main() -> None:
    from estimator import estimate

    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", nargs="+", default=["L4", "A100 80GB", "H100 80GB"])
    ap.add_argument("--modes", nargs="+", default=["inference", "training"])
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    estimate(str(MODEL), mode="inference", dtypes="bfloat16", seq_len=512)  # warm-up
    lines = ["| mode | GPU | fits | max batch | max seq | simulations | warm seconds (each run) |", "|---|---|---|---:|---:|---:|---|"]
    for mode in args.modes:
        extra = {"lora_rank": 16} if mode == "training" else {}
        for gpu in args.gpus:
            times, row = [], None
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                row = estimate(str(MODEL), mode=mode, dtypes="bfloat16", seq_len=2048, gpu=gpu, **extra).rows[0]
                times.append(time.perf_counter() - t0)
            assert row is not None and row.fit is not None
            fit = row.fit
            sims = sum(fit.get(k, {}).get("simulations", 0) for k in ("batch_boundary", "seq_boundary"))
            lines.append(f"| {mode}{' LoRA r16' if extra else ''} | {gpu} | {fit['fits']} | {fit['max_batch_size']} | {fit['max_seq_len']} "
                         f"| {sims} | {', '.join(f'{t:.1f}' for t in times)} |")
            print(lines[-1], flush=True)
    out = ROOT / "bench/results/fit_speed.md"
    out.write_text("# Fit answer speed: Llama-3.1-8B, bfloat16, batch 1 x 2048\n\n"
                   f"Command: `python -m bench.fit_speed` ({os.cpu_count()} CPUs; other sessions may have shared them).\n\n"
                   + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
