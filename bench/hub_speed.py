"""Whole-process speed of `accelerate estimate-memory` vs `estimate-memory`, against the Hub stand-in.

Usage: .venv/bin/python bench/hub_speed.py [--runs 3] [--out bench/results/hub_speed.md]

Starts `python -m tests.hub_server --port 0`, then for each model runs both commands (unmodified
accelerate 1.15 console script; our `python -m estimator`) `--runs` times each with a fresh
HF_HOME per run (a cold Hub cache, as a first-time user has), and reports the median wall time and
the ratio. Then times a warm answer inside one running process (what the app does): the first
`estimate()` call and the median of repeated calls for the same model and revision. ``--smoke``: one model, one
run, explicit dtypes only, 2 warm repeats, nothing written.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from testkit.hub_process import hub_env, start_hub_process, stop_hub_process  # noqa: E402

MODELS = ["bert-base-cased", "meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.1-70B", "meta-llama/Llama-3.1-405B"]
BIN = Path(sys.executable).parent


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, int, str]:
    started = time.perf_counter()
    result = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    return time.perf_counter() - started, result.returncode, result.stdout


def warm_in_process(url: str, model: str, repeats: int = 20) -> tuple[float, float]:
    code = (
        "import time, statistics\n"
        "from estimator import estimate\n"
        f"t = time.perf_counter(); estimate({model!r}); first = time.perf_counter() - t\n"
        "times = []\n"
        f"for _ in range({repeats}):\n"
        f"    t = time.perf_counter(); estimate({model!r}); times.append(time.perf_counter() - t)\n"
        "print(first, statistics.median(times))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=hub_env(url), cwd=ROOT, timeout=600)
    first, warm = out.stdout.split()
    return float(first), float(warm)


def main(argv: list[str] | None = None) -> int:
    from bench._smoke import SMOKE_HELP

    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "hub_speed.md"))
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = parser.parse_args(argv)
    models, dtype_sets, repeats = MODELS, (["float32", "float16"], None), 20
    if args.smoke:
        models, dtype_sets, repeats, args.runs, args.out = MODELS[:1], (["float32", "float16"],), 2, 1, None
    proc, url = start_hub_process()
    lines = [
        f"Against the Hub stand-in on loopback; median of {args.runs} whole-process runs each, fresh HF_HOME per run; "
        f"{os.cpu_count()} CPUs. Command: `.venv/bin/python bench/hub_speed.py --runs {args.runs}`.",
        "",
        "| model | dtypes (both tools) | accelerate estimate-memory | estimate-memory | ratio | our methods |",
        "|---|---|---:|---:|---:|---|",
    ]
    try:
        for dtypes in dtype_sets:
            for model in models:
                ours, theirs, methods = [], [], "?"
                flags = ["--dtypes", *dtypes] if dtypes else []
                for _ in range(args.runs):
                    env = hub_env(url, home=tempfile.mkdtemp(prefix="bench_hf_"))
                    seconds, status, _ = timed([str(BIN / "accelerate"), "estimate-memory", model, *flags], env)
                    theirs.append(seconds if status == 0 else float("nan"))
                    env = hub_env(url, home=tempfile.mkdtemp(prefix="bench_hf_"))
                    seconds, status, stdout = timed([sys.executable, "-m", "estimator", model, "--format", "json", *flags], env)
                    ours.append(seconds if status == 0 else float("nan"))
                    if status == 0:
                        methods = ", ".join(dict.fromkeys(row["method"] for row in json.loads(stdout)["rows"]))
                a, o = statistics.median(theirs), statistics.median(ours)
                label = " ".join(dtypes) if dtypes else "default (float32 float16 int8 int4)"
                lines.append(f"| {model} | {label} | {a:.2f} s | {o:.2f} s | {a / o:.1f}x | {methods} |")
                print(lines[-1], flush=True)
        first, warm = warm_in_process(url, "meta-llama/Llama-3.1-8B", repeats)
        lines += ["", f"In one running process (the app): first `estimate('meta-llama/Llama-3.1-8B')` {first * 1000:.0f} ms, "
                      f"then {warm * 1000:.1f} ms (median of {repeats} repeats: one revision lookup, answer from the cache)."]
        print(lines[-1])
    finally:
        stop_hub_process(proc)
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
