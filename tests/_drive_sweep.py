"""Drive sweeps in one process with one local Ray session (tests run it in a subprocess, so that
``HF_ENDPOINT`` is read at import and Ray's workers are started once for every step).

Reads ``{"refs": [...], "kill_refs": [...], "grid": {Grid fields}, "out": DIR, "cpu_refs": [...], "cpu_grid": {...}}``
as JSON on stdin and prints one JSON object: the first sweep's report and rows; the single answer
``estimate(reference, **options)`` for every (reference, scenario); a sweep of the CPU-target grid
(``device`` cpu) over ``cpu_refs`` with this process at 2 torch threads (Ray's workers run with
one), its rows and the single answers with the thread count left to its default (and at 1 thread, to
show the figures depend on it); the rerun's report and whether any part file changed; and a
third sweep of ``kill_refs`` into a fresh folder during which one worker process running a task is SIGKILLed
(its pid, and that sweep's rows).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import ray

from estimator import estimate
from estimator.messages import user_message
from estimator_sweep import Grid, Limits, read_dataset, sweep
from estimator_sweep.engine import Job, run_jobs

TASK_TITLE = "ray::run_task"


def _records(out: Path) -> list[dict[str, Any]]:
    return read_dataset(out).drop_columns(["computed_at", "seconds"]).to_pylist()


def _task_pids() -> list[int]:
    """Worker processes of this session running a sweep task now (Ray sets their title)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if cmdline.startswith(TASK_TITLE.encode()):
            found.append(int(entry))
    return found


def _sleep(seconds: float) -> None:
    time.sleep(seconds)


def _report(report: Any) -> dict[str, Any]:
    return {k: v for k, v in report.__dict__.items() if k != "out"}


def main() -> None:
    spec = json.load(sys.stdin)
    refs, out = spec["refs"], Path(spec["out"])
    grid = Grid(**{k: tuple(v) if isinstance(v, list) else v for k, v in spec["grid"].items()})
    limits = Limits(backoff_s=0.05, hub_retries=1, seconds=120)
    env = {k: os.environ[k] for k in ("HF_ENDPOINT", "HF_HOME", "HF_HUB_DISABLE_PROGRESS_BARS") if k in os.environ}
    ray.init(address="local", num_cpus=2, include_dashboard=False, object_store_memory=100 * 2**20, log_to_driver=False,
             configure_logging=False, runtime_env={"env_vars": env})
    result: dict[str, Any] = {"phase_seconds": {}}
    clock = time.monotonic()

    def phase(name: str) -> None:
        nonlocal clock
        now = time.monotonic()
        result["phase_seconds"][name] = round(now - clock, 1)
        clock = now

    phase("ray_init")
    first = sweep(refs, out=out / "first", grid=grid, limits=limits, progress=None)
    result["first"] = _report(first)
    result["rows"] = _records(out / "first")
    phase("first_sweep")

    singles = []
    for reference in refs:
        for scenario in grid.scenarios():
            kwargs = grid.estimate_kwargs(scenario)
            try:
                answer: dict[str, Any] = {"ok": estimate(reference, **kwargs).to_dict()}
            except Exception as exc:
                answer = {"error": user_message(exc)[0]}
            singles.append({"reference": reference, "scenario": scenario.__dict__, **answer})
    result["singles"] = singles
    phase("single_estimates")

    if spec.get("cpu_grid"):
        import torch

        torch.set_num_threads(2)  # the asking process's threads; each Ray worker runs with one
        cpu_grid = Grid(**{k: tuple(v) if isinstance(v, list) else v for k, v in spec["cpu_grid"].items()})
        sweep(spec["cpu_refs"], out=out / "cpu", grid=cpu_grid, limits=limits, progress=None)
        result["cpu_rows"] = _records(out / "cpu")
        cpu_singles = []
        for reference in spec["cpu_refs"]:
            for scenario in cpu_grid.scenarios():
                kwargs = {k: v for k, v in cpu_grid.estimate_kwargs(scenario).items() if k != "cpu_threads"}
                cpu_singles.append({"reference": reference, "scenario": scenario.__dict__, "ok": estimate(reference, **kwargs).to_dict(),
                                    "one_thread": estimate(reference, **kwargs, cpu_threads=1).to_dict()})
        result["cpu_singles"] = cpu_singles
        phase("cpu_sweep")

    parts = sorted((out / "first" / "data").glob("part-*.parquet"))
    before = {p.name: p.stat().st_mtime_ns for p in parts}
    rerun = sweep(refs, out=out / "first", grid=grid, limits=limits, progress=None)
    after = {p.name: p.stat().st_mtime_ns for p in sorted((out / "first" / "data").glob("part-*.parquet"))}
    result["rerun"] = _report(rerun)
    result["rewritten"] = sorted(name for name in after if before.get(name) != after[name])
    result["rows_after_rerun"] = _records(out / "first")
    phase("rerun")

    killed: list[int] = []

    def killer() -> None:
        deadline = time.monotonic() + 120
        while not killed and time.monotonic() < deadline:
            pids = _task_pids()
            if pids:
                os.kill(pids[0], signal.SIGKILL)
                killed.append(pids[0])
                return
            time.sleep(0.05)

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    third = sweep(spec["kill_refs"], out=out / "killed", grid=grid, limits=limits, progress=None)
    thread.join(timeout=1)
    result["killed"] = killed
    result["third"] = _report(third)
    result["rows_killed"] = _records(out / "killed")
    phase("killed_sweep")

    # a task past its deadline: the driver kills its worker (ray.cancel force) and reports a "limit" failure
    started = time.monotonic()
    outcomes = list(run_jobs(_sleep, [Job(key="sleeper", args=(60,), kwargs={}, deadline_s=1.0)], window=1, poll_s=0.2))
    result["deadline"] = {"kinds": [o.kind for o in outcomes], "errors": [o.error for o in outcomes], "seconds": round(time.monotonic() - started, 1)}
    phase("deadline")
    ray.shutdown()
    print(json.dumps(result, default=str))


if __name__ == "__main__":
    main()
