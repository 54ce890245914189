"""Build the "What fits my GPU?" dataset shipped with the app (estimator_app/data/sweep.parquet).

Run from the repository root: ``python -m tools.make_whatfits_dataset [--workers 1] [--out DIR]``. The models are every
real public repo the loopback Hub stand-in serves (``tests/hub_data/repos.json``, the ``estimator-test/*`` fault and
tiny repos left out: their configs are made up), their files copies of the Hub's (``../shared/hub-fixtures``); the
stand-in (``python -m tests.hub_server``) serves them to the real ``huggingface_hub`` client, so each row is the
estimator's answer for that Hub id at that commit, exactly as ``estimate-memory MODEL`` gives it (``estimate-memory
sweep``, one ``estimate()`` per scenario). The grid (:data:`GRID`): load and vLLM serving for every model; inference
(batch 1 x 2048 tokens) and training (LoRA r16, full fine-tuning; batch 1 x 2048, no gradient checkpointing: the
Trainer's default) in bfloat16, int8 and int4 (int4 + LoRA: QLoRA); on an RTX 4090 and an A100 80GB (the tab answers
any other GPU or typed memory size from ``needed_bytes``; each GPU's rows run their own fit search, about half a
minute a call on this 2-core machine, so more GPUs or scenarios multiply the hours). A part that ran past the task's time
limit is a row with that error (the tab counts it as "could not be estimated"). The sweep's folder is kept in
``--out`` (a rerun resumes); its parts are written into one Parquet file, sorted, at ``--dataset``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GPUS = ("RTX 4090", "A100 80GB")
# the largest last (their fake layers cost the most: many experts, wide layers), so a sweep cut short keeps the rest
LAST = ("mistralai/Mixtral-8x7B-v0.1", "meta-llama/Llama-3.1-70B", "meta-llama/Llama-3.1-405B", "bigscience/bloom",
        "deepseek-ai/DeepSeek-V3", "deepseek-ai/DeepSeek-R1")
GRID = ["--modes", "load", "inference", "training", "serving", "--dtypes", "bfloat16", "int8", "int4", "--batch-size", "1",
        "--seq-len", "2048", "--lora-rank", "none", "16"]


def models() -> list[str]:
    """The stand-in's real public repos (its made-up ``estimator-test`` repos left out)."""
    repos = json.loads((ROOT / "tests/hub_data/repos.json").read_text())["repos"]
    found = [r["id"] for r in repos if not r["id"].startswith("estimator-test/")]
    return sorted(found, key=lambda m: LAST.index(m) if m in LAST else -1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="1", help="Ray workers (default: 1)")
    parser.add_argument("--out", default=str(ROOT / ".whatfits_sweep"), help="the sweep's folder (a rerun resumes)")
    parser.add_argument("--dataset", default=str(ROOT / "estimator_app/data/sweep.parquet"), help="the Parquet file written")
    parser.add_argument("--task-timeout", default="600", help="seconds per estimate() call (default: 600)")
    args = parser.parse_args(argv)

    import pandas as pd

    from testkit.hub_process import hub_env, start_hub_process, stop_hub_process

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    listed = out / "models.txt"
    listed.write_text("\n".join(models()) + "\n")
    gpus = [flag for gpu in GPUS for flag in ("--gpu", gpu)]
    proc, url = start_hub_process()
    try:
        command = [sys.executable, "-m", "estimator", "sweep", "--models", str(listed), *GRID, *gpus, "--out", str(out),
                   "--workers", args.workers, "--task-timeout", args.task_timeout, "--no-progress"]
        done = subprocess.run(command, cwd=ROOT, env=hub_env(url, out / "hf_home"), check=False)
    finally:
        stop_hub_process(proc)
    if done.returncode != 0:
        return done.returncode
    frame = pd.concat([pd.read_parquet(p) for p in sorted((out / "data").glob("*.parquet"))], ignore_index=True)
    frame = frame.sort_values(["model", "mode", "dtype", "gpu", "lora_rank", "gradient_checkpointing"], na_position="first",
                              kind="stable").reset_index(drop=True)
    frame.to_parquet(args.dataset, index=False)
    print(f"{len(frame)} rows, {frame['model'].nunique()} models, {frame['error'].notna().sum()} with an error -> {args.dataset}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
