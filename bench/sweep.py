"""Sweep throughput on this machine: models per minute with 1 and 2 Ray workers, peak memory per worker.

``python -m bench.sweep`` builds a corpus of several hundred references — every repo of the Hub
stand-in (``tests/hub_data/repos.json``, served by ``python -m tests.hub_server`` on loopback), the
bundled catalog's configs (``estimator/source/catalog/data``) as local folders, and one small
config per transformers model type (``testkit.coverage.shrink`` of the type's default config, the
coverage bench's rule, written without building anything) — and sweeps it with ``estimate-memory
sweep``'s own code (:func:`estimator_sweep.sweep`) twice per grid: with 1 worker and with 2.
Grids: ``load`` (float32, bfloat16: the cheap rows; Hub repos with safetensors are answered from
headers without torch) and ``inference`` (seq 128, the same dtypes: simulated on fake tensors).
While a sweep runs, every Ray worker process's resident peak (``VmHWM``) is sampled.

Writes ``bench/results/sweep.md`` (and ``sweep_runs.json``, the raw figures). ``--limit N`` takes
the first N references; ``--smoke`` sweeps three tiny local folders with one worker and writes nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
PRICE_PER_VCPU_HOUR = 0.04  # USD; an assumption stated in the results, not a measurement


def stand_in_refs() -> list[str]:
    data = json.loads((ROOT / "tests" / "hub_data" / "repos.json").read_text())
    return [repo["id"] for repo in data["repos"]]


def catalog_refs(folder: Path) -> list[str]:
    refs = []
    for entry in sorted((ROOT / "estimator" / "source" / "catalog" / "data").iterdir()):
        if (entry / "config.json").is_file():
            target = folder / "catalog" / entry.name
            target.mkdir(parents=True, exist_ok=True)
            for file in entry.iterdir():
                if file.is_file():
                    (target / file.name).write_bytes(file.read_bytes())
            refs.append(str(target))
    return refs


def small_config_refs(folder: Path) -> list[str]:
    """One folder per transformers model type with a model class: its default config shrunk (no build)."""
    import warnings

    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from testkit.coverage import shrink, task_class

    warnings.filterwarnings("ignore")
    refs = []
    for model_type in sorted(CONFIG_MAPPING.keys()):
        found = task_class(model_type)
        if found is None:
            continue
        try:
            config = shrink(CONFIG_MAPPING[model_type]().to_dict(), 1)
        except Exception:  # noqa: BLE001 - a type whose default config cannot be made has no folder
            continue
        config["architectures"] = [found[1]]
        target = folder / "small" / model_type
        target.mkdir(parents=True, exist_ok=True)
        (target / "config.json").write_text(json.dumps(config, default=str))
        refs.append(str(target))
    return refs


class WorkerMemory:
    """Samples the resident peak (VmHWM) of every Ray worker process (``ray::run_task``, ``ray::IDLE``) under this driver, every 0.5 s."""

    def __init__(self) -> None:
        self.peaks: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        import psutil

        me = psutil.Process()
        while not self._stop.is_set():
            for child in me.children(recursive=True):
                try:
                    title = " ".join(child.cmdline())
                    if not title.startswith("ray::") or "Agent" in title:  # workers only, not Ray's own agents
                        continue
                    status = Path(f"/proc/{child.pid}/status").read_text()
                except (psutil.Error, OSError):
                    continue
                for line in status.splitlines():
                    if line.startswith("VmHWM:"):
                        self.peaks[child.pid] = max(self.peaks.get(child.pid, 0), int(line.split()[1]) * 1024)
            self._stop.wait(0.5)

    def __enter__(self) -> WorkerMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def run_one(refs: list[str], grid: Any, workers: int, out: Path, task_seconds: float = 120) -> dict[str, Any]:
    from estimator_sweep import Limits, read_dataset, sweep

    with WorkerMemory() as memory:
        started = time.monotonic()
        report = sweep(refs, out=out, grid=grid, workers=workers, limits=Limits(seconds=task_seconds, hub_retries=1, backoff_s=0.1), progress=None)
        seconds = time.monotonic() - started
        load = os.getloadavg()[1]  # the 5-minute load average at the end: the machine is shared
    table = read_dataset(out)
    errors = table.column("error").drop_null().to_pylist()
    kinds: dict[str, int] = {}
    for kind in table.column("error_kind").drop_null().to_pylist():
        kinds[kind] = kinds.get(kind, 0) + 1
    return {"workers": workers, "references": len(refs), "seconds": round(seconds, 1), "rows": table.num_rows, "error_rows": len(errors),
            "error_kinds": kinds, "models_per_minute": round(len(refs) / seconds * 60, 1), "computed": report.computed,
            "worker_peak_rss_bytes": max(memory.peaks.values(), default=0), "worker_processes": len(memory.peaks),
            "requested_rows_present": _all_present(table, refs, grid), "load_average_5min": round(load, 2),
            "median_call_seconds_by_method": _by_method(table),
            "bug_messages": sorted({_no_paths(e) for e, k in zip(table.column("error").to_pylist(), table.column("error_kind").to_pylist(),
                                                                strict=True) if k == "bug"})[:20]}


def _no_paths(message: str) -> str:
    """A message without this machine's absolute paths (a module's file in a repr): the results stay the same on any clone."""
    return re.sub(r"'/[^']*/(site-packages|lib/python[\d.]+)/", r"'<\1>/", message)


def _by_method(table: Any) -> dict[str, float]:
    """Median seconds of one estimate() call, by the method of its rows (stored = headers only, no torch)."""
    import statistics

    calls: dict[str, dict[tuple[str, str], float]] = {}
    for ref, mode, method, seconds in zip(*(table.column(c).to_pylist() for c in ("reference", "mode", "method", "seconds")), strict=True):
        calls.setdefault(method or "error", {})[(ref, mode)] = seconds
    return {method: round(statistics.median(v.values()), 3) for method, v in sorted(calls.items())}


def _all_present(table: Any, refs: list[str], grid: Any) -> bool:
    """Every (reference, scenario) has at least one row (a GGUF repo's rows are per file, not per dtype)."""
    seen = {(r, m) for r, m in zip(table.column("reference").to_pylist(), table.column("mode").to_pylist(), strict=True)}
    refs_abs = {str(Path(r).resolve()) if Path(r).exists() else r for r in refs}
    return all((r, s.mode) in seen for r in refs_abs for s in grid.scenarios())


def markdown(runs: list[dict[str, Any]], corpus: dict[str, int]) -> str:
    lines = ["# Sweep throughput (`python -m bench.sweep`)", "",
             f"Corpus: {sum(corpus.values())} references — " + ", ".join(f"{n} {k}" for k, n in corpus.items()) + ".",
             "Machine: 2 CPU cores shared with other work; local Ray (`estimator_sweep.sweep`, `address=\"local\"`).", "",
             "| grid | workers | references | rows | error rows | wall s | models / min | peak RSS per worker | every requested row present | load avg (5 min) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for run in runs:
        lines.append(f"| {run['grid']} | {run['workers']} | {run['references']} | {run['rows']} | {run['error_rows']} {run['error_kinds']} | "
                     f"{run['seconds']} | {run['models_per_minute']} | {run['worker_peak_rss_bytes'] / 2**20:.0f} MiB | {run['requested_rows_present']} | "
                     f"{run.get('load_average_5min', '')} |")
    lines += ["", "Median seconds of one `estimate()` call by the rows' method (`stored`: safetensors headers read over HTTP, no torch; "
              "`exact`: built on the meta device; `simulated`: run on fake tensors; `error`: failed calls):", ""]
    for run in runs:
        if run.get("median_call_seconds_by_method"):
            lines.append(f"- {run['grid']}, {run['workers']} worker(s): " + ", ".join(f"{k} {v} s" for k, v in run["median_call_seconds_by_method"].items()))
    lines += ["", "## Projection: 100,000 Hub repos", "",
              f"From the 1-worker rate measured here (one worker, on a machine shared with other work: see the load average, so a "
              f"dedicated core is likely faster), at an assumed ${PRICE_PER_VCPU_HOUR} per vCPU-hour (on-demand compute-optimized cloud "
              "instances; an assumption, not measured), nodes of 16 cores, one worker per core. Caveats: this corpus is mostly small "
              "configs (the inference run's first 100 references include the stand-in's 38 full-size repos, 70B and 405B among them, so it "
              "is the more representative); the stand-in answers on loopback, while the real Hub adds 0.1-0.3 s per request (a headers-only "
              "load row makes a few: model_info, the index, one Range read per shard) and rate-limits (HTTP 429, retried with backoff, "
              "then recorded as `hub` rows): a run of this size needs a token with a higher limit or a slower pace.", "",
              "Cheap rows: `load` rows of Hub repos with safetensors come from the headers (`method: stored`) and import neither torch "
              "nor transformers; `exact` rows build the model on the meta device (torch, seconds for large models); `simulated` rows "
              "(inference, training) run the model on fake tensors and dominate the cost; with `--gpu`, each inference or training row "
              "also searches the largest batch and context (more simulations).", "",
              "| grid | models / min / core | vCPU-hours | cost | 1 node | 10 nodes | 100 nodes |", "|---|---|---|---|---|---|---|"]
    for run in runs:
        if run["workers"] != 1:
            continue
        per_core = run["models_per_minute"]
        hours = 100_000 / per_core / 60
        lines.append(f"| {run['grid']} | {per_core} | {hours:,.1f} | ${hours * PRICE_PER_VCPU_HOUR:,.2f} | "
                     + " | ".join(f"{hours / (16 * n):,.1f} h" for n in (1, 10, 100)) + " |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sweep", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--smoke", action="store_true", help="three tiny local folders, one worker, nothing written")
    parser.add_argument("--limit", type=int, default=None, help="only the first N references")
    parser.add_argument("--grids", nargs="+", default=["load", "inference"], help="load and/or inference")
    parser.add_argument("--workers", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--report", action="store_true", help="only rewrite sweep.md from sweep_runs.json")
    args = parser.parse_args(argv)
    if args.report:
        stored = json.loads((RESULTS / "sweep_runs.json").read_text())
        (RESULTS / "sweep.md").write_text(markdown(stored["runs"], stored["corpus"]))
        print(markdown(stored["runs"], stored["corpus"]))
        return 0
    from estimator_sweep import Grid

    grids = {"load": Grid(modes=("load",), dtypes=("float32", "bfloat16")),
             "inference": Grid(modes=("inference",), dtypes=("float32", "bfloat16"), seq_lens=(128,))}
    with tempfile.TemporaryDirectory(prefix="bench_sweep_") as tmp:
        folder = Path(tmp)
        if args.smoke:
            from bench._smoke import TINY_LLAMA

            refs = []
            for i in range(3):
                target = folder / f"tiny-{i}"
                target.mkdir()
                (target / "config.json").write_text(json.dumps({**TINY_LLAMA, "num_hidden_layers": 1 + i}))
                refs.append(str(target))
            # the smoke checks that the pipeline works, not its speed: a shared machine's first task (a Ray worker
            # starting and importing torch) may take minutes under load, so its deadline is generous
            run = run_one(refs, grids["load"], 1, folder / "out", task_seconds=900)
            print(f"smoke: {run['references']} models, {run['rows']} rows in {run['seconds']} s, every row present: {run['requested_rows_present']}, "
                  f"error rows: {run['error_rows']} {run['error_kinds']} {run['bug_messages']}")
            return 0 if run["requested_rows_present"] and run["error_rows"] == 0 else 1
        from testkit.hub_process import hub_env, start_hub_process, stop_hub_process

        corpus = {"Hub stand-in repos": 0, "catalog folders": 0, "small configs": 0}
        refs = stand_in_refs()
        corpus["Hub stand-in repos"] = len(refs)
        catalog = catalog_refs(folder)
        corpus["catalog folders"] = len(catalog)
        small = small_config_refs(folder)
        corpus["small configs"] = len(small)
        refs = [*refs, *catalog, *small][: args.limit]
        proc, url = start_hub_process()
        os.environ.update(hub_env(url, folder / "hf_home"))
        runs = []
        try:
            for name in args.grids:
                for workers in args.workers:
                    run = run_one(refs, grids[name], workers, folder / f"out-{name}-{workers}")
                    run["grid"] = name
                    runs.append(run)
                    print(json.dumps(run), flush=True)
        finally:
            stop_hub_process(proc)
    RESULTS.mkdir(exist_ok=True)
    store = RESULTS / "sweep_runs.json"
    old = json.loads(store.read_text())["runs"] if store.is_file() else []
    fresh = {(r["grid"], r["workers"]) for r in runs}
    runs = [r for r in old if (r["grid"], r["workers"]) not in fresh] + runs  # a rerun of one grid keeps the others' figures
    runs.sort(key=lambda r: (r["grid"], r["workers"]))
    store.write_text(json.dumps({"corpus": corpus, "runs": runs}, indent=1) + "\n")
    (RESULTS / "sweep.md").write_text(markdown(runs, corpus))
    print(markdown(runs, corpus))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
