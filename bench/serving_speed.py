"""Benchmark: the serving plan of Llama-3.1-8B on one GPU (target: under 2 s warm).

Run from the repository root: ``python -m bench.serving_speed [--repeat N] [--out bench/results/serving_speed.md]``.
Each round is one ``estimator.estimate(<the Llama-3.1-8B fixture folder>, mode="serving", ...)`` in
bfloat16: resolving the local config, the load row (meta build), the model built again for the
plan, vLLM's profile run modelled from its kernels (``estimator.serving.activations``) and the plan. A
local folder is never answered from the estimate cache, so every round does the whole work ("warm": the
process has run one before). A last column times a plan asked again with another
``gpu_memory_utilization``. The first round
also pays PyTorch's first meta kernels (cold). Cases: an 80 GiB H100 with vLLM serve's defaults
there (8,192 batched tokens, 1,024 sequences) and a 24 GiB GPU (2,048 / 256). ``--smoke``: a 2-layer Llama, the 24 GiB
case at 512 tokens, one round, nothing written.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LLAMA = str(ROOT / "tests/hub_data/models/meta-llama/Llama-3.1-8B")
CASES = (
    ("H100 80GB, max_model_len 32768", {"gpu": "H100 80GB", "max_model_len": 32768}),
    ("24 GiB, max_model_len 8192", {"gpu_memory": "24GiB", "max_model_len": 8192}),
)
TARGET_S = 2.0


def main(argv: list[str] | None = None) -> int:
    from bench._smoke import SMOKE_HELP, tiny_llama_folder

    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=4)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = ap.parse_args(argv)
    model, cases = LLAMA, CASES
    if args.smoke:
        model, cases, args.repeat, args.out = str(tiny_llama_folder()), (("24 GiB, max_model_len 512", {"gpu_memory": "24GiB", "max_model_len": 512}),), 1, None
    t0 = time.perf_counter()
    from estimator import estimate

    imports = time.perf_counter() - t0
    lines = [f"imports: {imports:.2f} s"]
    table = []
    for name, kwargs in cases:
        times = []
        row = None
        for i in range(args.repeat):
            t = time.perf_counter()
            row = estimate(model, mode="serving", dtypes="bfloat16", **kwargs).row("bfloat16")  # type: ignore[arg-type]
            times.append(time.perf_counter() - t)
            lines.append(f"{name} round {i} ({'cold' if i == 0 and name == cases[0][0] else 'warm'}): {times[-1]:.2f} s")
        t = time.perf_counter()
        estimate(model, mode="serving", dtypes="bfloat16", gpu_memory_utilization=0.85, **kwargs)  # type: ignore[arg-type]
        again = time.perf_counter() - t
        assert row is not None and row.serving is not None
        s = row.serving
        warm = times[1:] if len(times) > 1 else times
        table.append((name, times[0], statistics.median(warm), max(warm), again, s["profile_peak_bytes"], s["kv_cache_tokens"],
                      s["max_concurrency"]))
    print("\n".join(lines))
    report = [
        "# Serving plan speed: Llama-3.1-8B, bfloat16",
        "",
        f"`python -m bench.serving_speed --repeat {args.repeat}` on {platform.processor() or platform.machine()} "
        f"({platform.python_implementation()} {platform.python_version()}), a machine shared with other sessions. "
        f"Target: under {TARGET_S:g} s warm (the whole `estimate(..., mode=\"serving\")`: config, load row, "
        "build, the profile run modelled from vLLM's kernels, plan). Imports before the first call: "
        f"{imports:.2f} s.",
        "",
        "| case | first call (s) | warm median (s) | warm max (s) | again, utilization 0.85 (s) | profile run above weights (bytes) "
        "| KV cache tokens | max concurrency |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, first, median, worst, again, prof, tokens, conc in table:
        report.append(f"| {name} | {first:.2f} | {median:.2f} | {worst:.2f} | {again:.2f} | {prof:,} | {tokens:,} | {conc:.2f}x |")
    report += ["", "The H100's capacity is the fit stage's figure for `H100 80GB` at the time of the run."]
    text = "\n".join(report) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
