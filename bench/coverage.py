"""Coverage over transformers' whole registry: every model type, a small config, built for real.

``python -m bench.coverage --tag before`` runs every ``model_type`` of
``transformers.models.auto.configuration_auto.CONFIG_MAPPING_NAMES`` through
:func:`testkit.coverage.run_type` (main task class, small config by the documented shrinking rule,
the real CPU build's bytes, ``estimate()`` on a folder with that config.json in modes load,
inference and training) in at most 2 worker processes, each under an address-space limit, each
type under a time limit (a worker past it is killed and restarted; the type is recorded as a
timeout). Rows go to ``bench/results/coverage_<tag>.jsonl`` as they come, so a run that stops
resumes where it left (``--retry`` runs the listed types again). ``--report`` writes
``bench/results/coverage_<tag>.md`` (by category, by failure cause, what remains) and
``coverage_<tag>.csv`` from the jsonl; ``--compare before after`` writes the before/after tables.
``--smoke``: one type (gpt2) in one worker, its row in a temporary folder, nothing written here (CI).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import select
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
ROOT = Path(__file__).resolve().parent.parent
ADDRESS_SPACE = 8 * 1024**3  # per worker (torch reserves address space; resident stays far lower)
MODES = ("load", "inference", "training")


def all_types() -> list[str]:
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    return sorted(CONFIG_MAPPING_NAMES)


# ---------------------------------------------------------------------------------------------
# worker: reads model types on stdin, writes one JSON row per line on stdout
# ---------------------------------------------------------------------------------------------

def worker() -> None:
    import logging
    import warnings

    logging.disable(logging.CRITICAL)
    warnings.filterwarnings("ignore")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    from testkit.coverage import run_type

    out = sys.stdout
    sys.stdout = sys.stderr  # anything the models print stays off the protocol
    for line in sys.stdin:
        model_type = line.strip()
        if not model_type:
            continue
        try:
            row = run_type(model_type)
        except BaseException as exc:  # noqa: BLE001 - the bench's own failure is a row too
            row = {"model_type": model_type, "status": "bench-error", "skip_reason": f"{type(exc).__name__}: {exc}"[:500]}
        out.write(json.dumps(row, default=str) + "\n")
        out.flush()


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))
    os.nice(5)


class Worker:
    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.coverage", "--worker"], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, text=True, preexec_fn=_limit, env={**os.environ, "TRANSFORMERS_VERBOSITY": "error"},
        )
        self.current: str | None = None
        self.since = 0.0

    def give(self, model_type: str) -> None:
        assert self.proc.stdin is not None
        self.current, self.since = model_type, time.monotonic()
        self.proc.stdin.write(model_type + "\n")
        self.proc.stdin.flush()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def run(tag: str, types: list[str], *, workers: int, timeout: float, again: bool = False) -> None:
    path = RESULTS / f"coverage_{tag}.jsonl"
    done = {json.loads(line)["model_type"] for line in path.read_text().splitlines()} if path.exists() and not again else set()
    pending = [t for t in types if t not in done]
    print(f"{len(pending)} types to run ({len(done)} already in {path.name})", file=sys.stderr)
    pool = [Worker() for _ in range(min(workers, len(pending)))]
    started, last = time.monotonic(), -1
    sink = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        def record(row: dict[str, Any]) -> None:
            # one write() per row on an O_APPEND descriptor: runs of other --types may append beside this one
            os.write(sink, (json.dumps(row, default=str) + "\n").encode())

        while pending or any(w.current for w in pool):
            for w in pool:
                if w.current is None and pending:
                    w.give(pending.pop(0))
            busy = {w.proc.stdout.fileno(): w for w in pool if w.current and w.proc.stdout is not None}
            ready, _, _ = select.select(list(busy), [], [], 1.0)
            for fd in ready:
                w = busy[fd]
                assert w.proc.stdout is not None
                line = w.proc.stdout.readline()
                if line:
                    row = json.loads(line)
                    row["seconds"] = round(time.monotonic() - w.since, 2)
                    record(row)
                    w.current = None
                else:  # the worker died (memory limit, a crash in native code)
                    record({"model_type": w.current, "status": "crashed", "skip_reason": f"worker exited with {w.proc.wait()}"})
                    pool[pool.index(w)] = Worker()
            for i, w in enumerate(pool):
                if w.current and time.monotonic() - w.since > timeout:
                    record({"model_type": w.current, "status": "timeout", "skip_reason": f"over {timeout:.0f} s"})
                    w.stop()
                    pool[i] = Worker()
            if len(pending) != last:
                last = len(pending)
                print(f"{last} left, {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
    finally:
        os.close(sink)
    for w in pool:
        w.stop()
    print(file=sys.stderr)


# ---------------------------------------------------------------------------------------------
# report
# ---------------------------------------------------------------------------------------------

def load_rows(tag: str) -> list[dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = {}
    for line in (RESULTS / f"coverage_{tag}.jsonl").read_text().splitlines():
        row = json.loads(line)
        rows[row["model_type"]] = row  # a later row (--retry) replaces an earlier one
    return [rows[t] for t in sorted(rows)]


def built(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r.get("status") == "done"]


def category_table(rows: list[dict[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    from testkit.coverage import CATEGORIES

    head = ["category", "types", "small config built", "load exact", "inference simulated", "training simulated", "internal errors"]
    by: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by[r.get("category") or "other"].append(r)
    body = []
    for cat in [*CATEGORIES, "all"]:
        group = rows if cat == "all" else by.get(cat, [])
        if not group:
            continue
        b = built(group)
        n = len(b)

        errors = sum(1 for r in b for m in MODES if r[m]["status"] == "error")
        body.append([cat, len(group), n, _share(sum(r["load"]["status"] == "ok" for r in b), n),
                     _share(sum(r["inference"]["status"] == "ok" for r in b), n), _share(sum(r["training"]["status"] == "ok" for r in b), n), errors])
    return head, body


def media_table(rows: list[dict[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    """VLM and speech types: of the simulated rows, how many were fed images, audio or a protein (rows written
    before the bench recorded inputs count as "not recorded")."""
    head = ["category", "mode", "simulated", "with images", "with audio", "with a protein", "text only", "text only (fallback)",
            "not recorded"]
    body = []
    groups = {"VLM": lambda r: r.get("category") == "VLM", "speech": lambda r: r.get("category") == "speech",
              # image-text-to-text types whose language model puts them in the MoE or hybrid/SSM category count too
              "image-text-to-text task (any category)": lambda r: r.get("task") == "image-text-to-text"}
    for cat, member in groups.items():
        for mode in ("inference", "training"):
            ok = [r[mode] for r in built(rows) if member(r) and r[mode]["status"] == "ok"]
            kinds = Counter(e.get("inputs", "not recorded") for e in ok)
            body.append([cat, mode, len(ok), kinds["images"], kinds["audio"], kinds["protein + text"], kinds["text"], kinds["text only (fallback)"],
                         kinds["not recorded"]])
    return head, body


def _share(count: int, n: int) -> str:
    return f"{count} ({100 * count / n:.1f}%)" if n else "-"


def cause_table(rows: list[dict[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    counts: Counter[tuple[str, str]] = Counter()
    types: dict[tuple[str, str], set[str]] = defaultdict(set)
    for r in built(rows):
        for m in MODES:
            entry = r[m]
            if entry["status"] != "ok":
                key = (_cause(entry), entry["status"])
                types[key].add(r["model_type"])
                counts[key] += 1
    body = []
    for (text, status), _ in sorted(counts.items(), key=lambda kv: (-len(types[kv[0]]), kv[0])):
        names = sorted(types[(text, status)])
        body.append([len(names), status, text.replace("|", "\\|"), ", ".join(names[:8]) + (" …" if len(names) > 8 else "")])
    return ["types", "row", "cause", "examples"], body


def _cause(entry: dict[str, Any]) -> str:
    """The entry's cause, normalised again from its detail (so a better normaliser needs no new run)."""
    from testkit.coverage import cause

    detail = entry.get("detail")
    if not detail:
        return str(entry.get("cause") or entry["status"])
    prefix = {"error": "internal ", "refused": ""}.get(entry["status"], "")
    name = entry.get("error")
    return f"{prefix}{name}: {cause(detail)}" if name else cause(detail)


FAMILIES = (  # (family, words in the failure detail), first match wins
    ("needs inputs other than token ids (images, audio, boxes, a second tower's inputs)",
     ("required positional argument", "unexpected keyword argument 'input_ids'", "'NoneType' object has no attribute",
      "You have to specify", "Input image size", "specify exactly one of input_ids", "Input must be a", "to have 3 channels",
      "channels, but got", "pixel_values")),
    ("a cache that is not an attention cache (hybrid/SSM)", ("get_seq_length", "LinearAttention", "cache_params", "conv_states")),
    ("a data-dependent op on fake tensors", ("DataDependentOutputException", "DynamicOutputShapeException", "data-dependent")),
    ("real tensors made inside the model's forward", ("convert all Tensors to FakeTensors", "Mixing fake modes")),
    ("refused: the config breaks a rule of its library", ("MalformedConfigError", "The config")),
    ("a shape mismatch in the model's code at the small config", ("must match the size", "broadcast", "split_with_sizes",
                                                                  "shape '", "same reduction dim", "invalid for input")),
)


def family(entry: dict[str, Any]) -> str:
    text = f"{entry.get('error', '')}: {entry.get('detail') or entry.get('cause') or ''}"
    if entry["status"] == "mismatch":
        return "load bytes differ from the real build"
    if entry["status"] == "timeout":
        return "timeout"
    return next((name for name, words in FAMILIES if any(w in text for w in words)), "other")


def family_table(rows: list[dict[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    types: dict[str, set[str]] = defaultdict(set)
    for r in built(rows):
        for m in MODES:
            if r[m]["status"] != "ok":
                types[family(r[m])].add(r["model_type"])
    body = [[len(v), k, ", ".join(sorted(v)[:6]) + (" …" if len(v) > 6 else "")] for k, v in sorted(types.items(), key=lambda kv: -len(kv[1]))]
    return ["types", "cause family", "examples"], body


def markdown(head: list[str], body: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in body]
    return "\n".join(lines)


def report(tag: str) -> str:
    rows = load_rows(tag)
    skipped = [r for r in rows if r.get("status") != "done"]
    b = built(rows)
    seconds = {m: sorted(r[m]["seconds"] for r in b) for m in MODES}
    text = [f"# Coverage over transformers' registry ({tag})", "",
            f"{len(rows)} model types; small config built for real on CPU: {len(b)}; not built: {len(skipped)}.", "",
            "Command: `python -m bench.coverage --tag " + tag + "` then `python -m bench.coverage --report " + tag + "`.", "",
            "## By category", "", markdown(*category_table(rows)), "",
            "## Inputs of the simulated VLM and speech rows", "", markdown(*media_table(rows)), "",
            "Simulated with text only although their task takes images (image-text-to-text): "
            + (", ".join(sorted(r["model_type"] for r in built(rows) if r.get("task") == "image-text-to-text"
                                and r["inference"]["status"] == "ok" and not str(r["inference"].get("inputs")).startswith(("images", "audio", "protein"))))
               or "none") + ".", "",
            "## By cause family", "", markdown(*family_table(rows)), "",
            "## By failure cause (rows that are not exact / not simulated)", "", markdown(*cause_table(rows)), "",
            "## Seconds per mode (types built)", "",
            markdown(["mode", "median", "p90", "max"], [[m, _q(s, 0.5), _q(s, 0.9), _q(s, 1.0)] for m, s in seconds.items()]), "",
            "## Not built (skipped, with the reason)", "",
            markdown(["model type", "class", "status", "reason"],
                     [[r["model_type"], r.get("class") or "", r.get("status"), str(r.get("skip_reason", "")).replace("|", "\\|").replace("\n", " ")[:200]]
                      for r in skipped]), ""]
    (RESULTS / f"coverage_{tag}.md").write_text("\n".join(text))
    with (RESULTS / f"coverage_{tag}.csv").open("w", newline="") as handle:
        out = csv.writer(handle)
        out.writerow(["model_type", "category", "task", "class", "status", "level", "params", "truth_bytes",
                      *[f"{m}_{k}" for m in MODES for k in ("status", "method", "bytes", "seconds", "cause")], "skip_reason"])
        for r in rows:
            modes = [r.get(m) or {} for m in MODES]
            out.writerow([r["model_type"], r.get("category"), r.get("task"), r.get("class"), r.get("status"), r.get("level"),
                          r.get("params"), r.get("truth_bytes"),
                          *[e.get(k) for e in modes for k in ("status", "method", "bytes", "seconds", "cause")], r.get("skip_reason")])
    return "\n".join(text)


def compare(before: str, after: str) -> str:
    """``coverage.md``: the category tables of two runs side by side, then each run's top causes."""
    rows_b, rows_a = load_rows(before), load_rows(after)
    head_full, body_full = category_table(rows_a)
    common = {r["model_type"] for r in rows_b} & {r["model_type"] for r in rows_a}
    _, body_b = category_table([r for r in rows_b if r["model_type"] in common])
    _, body_a = category_table([r for r in rows_a if r["model_type"] in common])
    by_b = {r[0]: r for r in body_b}
    head = ["category", "types", f"built ({before} → {after})", "load exact", "inference simulated", "training simulated", "internal errors"]
    body = []
    for r in body_a:
        old = by_b.get(r[0], [r[0], 0, 0, "-", "-", "-", 0])
        body.append([r[0], r[1], f"{old[2]} → {r[2]}", *[f"{old[i]} → {r[i]}" for i in (3, 4, 5, 6)]])
    text = [f"# Coverage over transformers' registry: {before} and {after}", "",
            f"Commands: `python -m bench.coverage --tag {before}` (then `--tag {after}` after the fixes), "
            f"`python -m bench.coverage --compare {before} {after}`; rows in coverage_{before}.jsonl / coverage_{after}.jsonl "
            f"(and .csv), each run's full report in coverage_{before}.md / coverage_{after}.md.", "",
            "Percentages are of the types whose small config was built for real on the CPU.", "",
            f"## By category, {after} (the whole registry: {len(rows_a)} types)", "", markdown(head_full, body_full), "",
            f"## By category, {before} → {after} (the {len(common)} types both runs reached)", "", markdown(head, body), ""]
    for tag, rows in ((before, rows_b), (after, rows_a)):
        text += [f"## Cause families, {tag} (each run's own types)", "", markdown(*family_table(rows)), ""]
    for tag, rows in ((before, rows_b), (after, rows_a)):
        head_c, body_c = cause_table(rows)
        text += [f"## Failure causes, {tag} (types per cause, first 25)", "", markdown(head_c, body_c[:25]), ""]
    out = "\n".join(text)
    (RESULTS / "coverage.md").write_text(out)
    return out


def _q(values: list[float], q: float) -> str:
    return f"{values[min(len(values) - 1, int(q * (len(values) - 1) + 0.5))]:.2f}" if values else "-"


def smoke() -> int:
    """One type through the whole path (worker process, limits, the row), into a temporary results folder."""
    import tempfile

    global RESULTS
    kept, RESULTS = RESULTS, Path(tempfile.mkdtemp(prefix="coverage_smoke_"))
    try:
        run("smoke", ["gpt2"], workers=1, timeout=120.0)
        row = json.loads((RESULTS / "coverage_smoke.jsonl").read_text().splitlines()[0])
    finally:
        import shutil

        shutil.rmtree(RESULTS, ignore_errors=True)
        RESULTS = kept
    print(json.dumps({m: row.get(m, {}).get("status") for m in MODES} | {"model_type": row["model_type"], "status": row.get("status")}))
    return 0 if row.get("status") == "done" and all(row[m]["status"] == "ok" for m in MODES) else 1


def main(argv: list[str] | None = None) -> int | None:
    from bench._smoke import SMOKE_HELP

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--tag", default="after", help="name of the run (results file coverage_<tag>.jsonl)")
    parser.add_argument("--types", nargs="*", help="only these model types (default: the whole registry)")
    parser.add_argument("--retry", action="store_true", help="run the given --types again even if they have a row")
    parser.add_argument("--workers", type=int, default=2, help="worker processes (at most 2)")
    parser.add_argument("--timeout", type=float, default=90.0, help="seconds per type")
    parser.add_argument("--report", metavar="TAG", help="write coverage_TAG.md and .csv from its jsonl")
    parser.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"), help="write coverage.md: two runs side by side")
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = parser.parse_args(argv)
    if args.smoke:
        return smoke()
    if args.worker:
        worker()
        return
    if args.report:
        print(report(args.report))
        return
    if args.compare:
        print(compare(*args.compare))
        return
    types = args.types or all_types()
    # --retry appends new rows; the report keeps each type's last row (load_rows)
    run(args.tag, types, workers=max(1, min(args.workers, 2)), timeout=args.timeout, again=bool(args.retry and args.types))


if __name__ == "__main__":
    raise SystemExit(main())
