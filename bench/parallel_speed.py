"""Benchmark: how long a per-GPU estimate takes, warm (imports done, a first call made).

``python -m bench.parallel_speed [--out bench/results/parallel_speed.md] [--repeats 3]`` from the
repository root. The issue's target: Llama-3.1-70B (the bundled catalog's config.json, so no
network), 8 GPUs, FSDP, bfloat16, batch 1 x 4096 tokens, training, under 10 s warm. Also timed:
ZeRO-3 and tensor-parallel inference on 8 GPUs, gradient checkpointing. Each figure is the median
of ``--repeats`` warm calls of ``estimator.estimate`` on a local folder holding that config. ``--smoke``: a 2-layer
Llama, the FSDP run only, one warm call, 128 tokens, nothing written.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from estimator import estimate

CONFIG = Path("estimator/source/catalog/data/meta-llama__Llama-3.1-70B/config.json")
RUNS: list[tuple[str, dict[str, Any]]] = [
    ("FSDP training (the target)", dict(mode="training", strategy="fsdp")),
    ("FSDP training, gradient checkpointing", dict(mode="training", strategy="fsdp", gradient_checkpointing=True)),
    ("ZeRO-3 training", dict(mode="training", strategy="zero3")),
    ("tensor-parallel inference", dict(mode="inference", strategy="tp")),
]
TARGET_S = 10.0


def main(argv: list[str] | None = None) -> int:
    from bench._smoke import SMOKE_HELP, TINY_LLAMA

    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=Path("bench/results/parallel_speed.md"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = parser.parse_args(argv)
    runs, seq_len = RUNS, 4096
    if args.smoke:
        runs, seq_len, args.repeats = RUNS[:1], 128, 1
    lines = [
        "# Per-GPU estimates: speed (warm)", "",
        "`python -m bench.parallel_speed` — Llama-3.1-70B (bundled config), 8 GPUs, bfloat16, batch 1 x 4096, "
        f"device cuda; median of {args.repeats} warm calls after one cold call. Target: FSDP training under {TARGET_S:g} s.", "",
        f"Machine: {platform.processor() or platform.machine()}, {torch.get_num_threads()} torch threads, torch {torch.__version__}.", "",
        "| run | cold s | warm s (median) | per-GPU peak | within target |", "|---|---|---|---|---|",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "Llama-3.1-70B"
        folder.mkdir()
        if args.smoke:
            (folder / "config.json").write_text(json.dumps(TINY_LLAMA))
        else:
            shutil.copy(CONFIG, folder / "config.json")
        for name, kw in runs:
            times = []
            peak = None
            for _ in range(args.repeats + 1):
                t0 = time.perf_counter()
                result = estimate(str(folder), dtypes="bfloat16", gpus=8, batch_size=1, seq_len=seq_len, **kw)
                times.append(time.perf_counter() - t0)
                peak = result.rows[0].peak_bytes
            warm = statistics.median(times[1:])
            ok = "yes" if warm < TARGET_S else "NO"
            lines.append(f"| {name} | {times[0]:.2f} | {warm:.2f} | {peak / 2**30:.2f} GiB | {ok if 'target' in name else '-'} |")
            print(lines[-1], flush=True)
    if not args.smoke:
        args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
