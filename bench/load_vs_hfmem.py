"""A load answer's speed against hf-mem's and accelerate's, on the same Hub stand-in, as ratios in one run.

Usage: .venv/bin/python bench/load_vs_hfmem.py [--runs 5] [--accelerate-runs 1] [--out bench/results/load_vs_hfmem.md]

Needs ``pip install hf-mem`` (bench only; 0.5.6 measured; not a dependency of the estimator or its tests): hf-mem
writes ``https://huggingface.co`` into its URLs, so ``bench/_hfmem_loopback.py`` sends its requests to the stand-in.
Starts ``python -m tests.hub_server --port 0``; for each repo of the stand-in with safetensors weights runs, in turns
and each in a fresh process with a fresh ``HF_HOME`` (a first-time user's cold cache):

- ``estimate-memory REPO --json`` (``python -m estimator``, its default dtypes),
- ``hf-mem --model-id REPO --json-output``,
- ``accelerate estimate-memory REPO`` (``--accelerate-runs`` times; it builds the model on meta, seconds each),

and reports the median wall time of each and the ratio hf-mem / ours (above 1: ours is faster), the median CPU time
(user + system of the child, less sensitive to the machine's other work), the Hub requests each made for one answer
(the stand-in's ``GET /_standin/requests``), whether hf-mem's total is one of our rows' totals (the same bytes), and
the machine's load (``os.getloadavg``) before and after. ``--smoke``: two repos, one run, no accelerate, nothing written.

Both tools run with their modules' bytecode compiled, as ``pip install`` leaves an installed package: hf-mem's in
site-packages, ours by ``python -m compileall estimator`` before the first run (a checkout run with
``PYTHONDONTWRITEBYTECODE=1`` would otherwise compile ``estimator``'s modules from source in every process, about 30 ms
of CPU that no installed copy pays).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from testkit.hub_process import hub_env, start_hub_process, stop_hub_process  # noqa: E402

# the stand-in's repos with safetensors weights (tests/hub_server.py): single files, then sharded indexes
REPOS = [
    "openai-community/gpt2", "google-bert/bert-base-cased", "FacebookAI/roberta-base", "sentence-transformers/all-MiniLM-L6-v2",
    "google/gemma-2b-it", "meta-llama/Llama-3.2-3B", "meta-llama/Llama-3.1-8B", "Qwen/Qwen2.5-7B", "mistralai/Mistral-7B-v0.1",
    "mistralai/Mixtral-8x7B-v0.1", "meta-llama/Llama-3.1-70B", "bigscience/bloom",
]
LISTED = "meta-llama/Llama-3.1-8B"  # whose requests are listed one by one
BIN = Path(sys.executable).parent


def _timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float, int, str]:
    """Wall seconds, CPU seconds (user + system of the child), exit status and stdout of one process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=900, check=False)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.returncode, done.stdout


def _requests(url: str, reset: bool = False) -> list[str]:
    if reset:
        urllib.request.urlopen(urllib.request.Request(f"{url}/_standin/reset", method="POST"), timeout=10).read()
        return []
    with urllib.request.urlopen(f"{url}/_standin/requests", timeout=10) as response:
        return [f"{r['method']} {r['path']} {r['status']}" for r in json.loads(response.read())]


def _env(url: str) -> dict[str, str]:
    env = hub_env(url, home=tempfile.mkdtemp(prefix="bench_hf_"))
    env.pop("HF_HUB_DISABLE_TELEMETRY", None)  # as a user runs each tool (our CLI keeps the Hub's telemetry off itself)
    return env


def main(argv: list[str] | None = None) -> int:
    from bench._smoke import SMOKE_HELP

    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--accelerate-runs", type=int, default=1)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "load_vs_hfmem.md"))
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = parser.parse_args(argv)
    repos = REPOS
    if args.smoke:
        repos, args.runs, args.accelerate_runs, args.out = ["openai-community/gpt2", LISTED], 1, 0, None
    have_hfmem = importlib.util.find_spec("hf_mem") is not None
    tools: dict[str, list[str]] = {"ours": [sys.executable, "-m", "estimator"]}
    if have_hfmem:
        tools["hf-mem"] = [sys.executable, str(ROOT / "bench" / "_hfmem_loopback.py"), "--model-id"]
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "estimator")], check=True, stdout=subprocess.DEVNULL)
    load_before = os.getloadavg()
    proc, url = start_hub_process()
    rows, listed = [], {}
    try:
        for repo in repos:
            wall: dict[str, list[float]] = {name: [] for name in tools}
            cpu: dict[str, list[float]] = {name: [] for name in tools}
            made: dict[str, int] = {}
            outputs: dict[str, str] = {}
            for run in range(args.runs):
                for name, cmd in tools.items():
                    extra = ["--json"] if name == "ours" else ["--json-output"]
                    _requests(url, reset=True)
                    seconds, used, status, stdout = _timed([*cmd, repo, *extra], _env(url))
                    if status != 0:
                        seconds = used = float("nan")
                    wall[name].append(seconds)
                    cpu[name].append(used)
                    if run == 0:
                        sent = _requests(url)
                        made[name], outputs[name] = len(sent), stdout
                        if repo == LISTED:
                            listed[name] = sent
            accelerate = [_timed([str(BIN / "accelerate"), "estimate-memory", repo], _env(url))[0] for _ in range(args.accelerate_runs)]
            rows.append((repo, {k: statistics.median(v) for k, v in wall.items()}, {k: statistics.median(v) for k, v in cpu.items()},
                         made, _same_bytes(outputs), statistics.median(accelerate) if accelerate else None))
            print(_line(rows[-1], have_hfmem), flush=True)
    finally:
        stop_hub_process(proc)
    load_after = os.getloadavg()
    lines = _report(rows, listed, args, have_hfmem, load_before, load_after)
    print("\n".join(lines[-6:]))
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")
    return 0


def _same_bytes(outputs: dict[str, str]) -> str:
    """Whether hf-mem's total is one of our rows' ``total_bytes`` (its dtype is the checkpoint's)."""
    try:
        ours = {row["total_bytes"] for row in json.loads(outputs["ours"])["rows"]}
        theirs = json.loads(outputs["hf-mem"])["memory"]
    except (KeyError, ValueError, TypeError):
        return "?"
    return "yes" if theirs in ours else f"no ({theirs:,})"


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}" if a and b and a == a and b == b else "—"


def _line(row: tuple, have_hfmem: bool) -> str:  # type: ignore[type-arg]
    repo, wall, cpu, made, same, accelerate = row
    hf = wall.get("hf-mem")
    acc = f"{accelerate:.2f} s" if accelerate is not None else "—"
    return (f"| {repo} | {wall['ours']:.3f} s | {hf:.3f} s | {_ratio(hf, wall['ours'])} | {cpu['ours']:.3f} s | "
            f"{cpu.get('hf-mem', float('nan')):.3f} s | {_ratio(cpu.get('hf-mem'), cpu['ours'])} | {acc} | {_ratio(accelerate, wall['ours'])} | "
            f"{made.get('ours', '?')} | {made.get('hf-mem', '?')} | {same} |") if have_hfmem else f"| {repo} | {wall['ours']:.3f} s | (hf-mem not installed) |"


def _report(rows: list[tuple], listed: dict[str, list[str]], args: argparse.Namespace, have_hfmem: bool,  # type: ignore[type-arg]
            before: tuple[float, float, float], after: tuple[float, float, float]) -> list[str]:
    lines = [
        f"A load answer, whole process, against the Hub stand-in on loopback; median of {args.runs} runs each, tools in turns, "
        f"fresh HF_HOME per run, bytecode compiled for both; accelerate: median of {args.accelerate_runs}. {os.cpu_count()} CPUs; load average "
        f"(1, 5, 15 min) {before[0]:.2f} {before[1]:.2f} {before[2]:.2f} before, {after[0]:.2f} {after[1]:.2f} {after[2]:.2f} after. "
        f"Command: `.venv/bin/python bench/load_vs_hfmem.py --runs {args.runs} --accelerate-runs {args.accelerate_runs}` "
        "(after `pip install hf-mem`).",
        "",
        "Ratios are the other tool's time over ours: above 1, ours is faster.",
        "",
        "| repo | ours (wall) | hf-mem (wall) | hf-mem / ours | ours (CPU) | hf-mem (CPU) | hf-mem / ours (CPU) | accelerate (wall) | "
        "accelerate / ours | Hub requests, ours | Hub requests, hf-mem | same bytes |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        *(_line(row, have_hfmem) for row in rows),
    ]
    if have_hfmem and rows:
        walls = [row[1]["hf-mem"] / row[1]["ours"] for row in rows if row[1]["ours"] == row[1]["ours"] and row[1]["hf-mem"] == row[1]["hf-mem"]]
        cpus = [row[2]["hf-mem"] / row[2]["ours"] for row in rows if row[2]["ours"] == row[2]["ours"] and row[2]["hf-mem"] == row[2]["hf-mem"]]
        if walls and cpus:
            lines += ["", f"Median over the {len(walls)} repos, hf-mem / ours: wall {statistics.median(walls):.2f}, CPU {statistics.median(cpus):.2f}."]
    for name, sent in listed.items():
        lines += ["", f"The Hub requests of one {LISTED} answer, {name} ({len(sent)}):", "", *(f"- `{line}`" for line in sent)]
    return lines


if __name__ == "__main__":
    raise SystemExit(main())
