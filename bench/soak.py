"""Soak test: many mixed requests through the app's HTTP API, as strangers would send them.

    python bench/soak.py                          # 2,000 requests, 20 concurrent users
    python bench/soak.py --requests 200 --users 8 # a short run
    python bench/soak.py --smoke                  # seconds: 12 requests, 3 users, one model warmed (CI)

It starts the Hub stand-in and the app on loopback (``bench/load_test.py``'s ``start_stack``) and
sends a shuffled mix: repeats of answered requests, models and dtype sets not asked before,
inference and training estimates of small models with distinct shapes (each a new simulation on
fake tensors), bad input (malformed ids, missing repos, server paths), and the gated fixture repo
with the approved token, with no token and with an unapproved one, and questions to the "What fits my GPU?"
tab (``/what_fits``) over the dataset the app ships. Each request has an expected
outcome — an answer, or a documented refusal (the page's message in its status box, ``class="mme-error"``, that
is not an internal error; the handlers never raise) — and anything else counts as an undocumented error.

Pass (exit 0) when: no undocumented error; every repeated request's answer is byte-identical to
the first answer of the same request (the whole output list, as JSON); the app's resident memory
grows by less than 100 MB between the end of the warm-up and the end of the run (the fake-tensor
caches of the simulations are the suspect: the run makes one new simulation per distinct shape).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.load_test import FITS_QUERIES, AppError, call, endpoint_inputs, fits_inputs, percentile, rss_mb, start_stack, stop_stack  # noqa: E402  (after the path fix)

TARGET_GROWTH_MB = 100.0
APPROVED, UNAPPROVED = "hf_standin_user", "hf_standin_unapproved"  # the stand-in's test tokens
POPULAR = ("openai-community/gpt2", "google-bert/bert-base-cased", "meta-llama/Llama-3.1-8B", "Qwen/Qwen2.5-7B")
NEW = ("FacebookAI/roberta-base", "timm/resnet50.a1_in1k", "google/gemma-2b-it", "mistralai/Mistral-7B-v0.1", "estimator-test/tiny-llama")
DTYPE_SETS = (["float32"], ["float16"], ["bfloat16"], ["int8"], ["int4"], ["float32", "int4"], ["bfloat16", "int8"], ["float16", "bfloat16"])
BAD = ("not a model id!!", "estimator-test/does-not-exist", "/etc", "../../root", "https://example.com/x/y", "a" * 300)


def form(model: str, dtypes: list[str], *, mode: str = "load", batch: int = 1, seq: int = 0, token: str = "") -> list[object]:
    """The ``/estimate`` endpoint's inputs (the form's own fields and defaults, ``bench.load_test.endpoint_inputs``)."""
    return endpoint_inputs(model, dtypes, token=token, mode=mode, batch=batch, seq=seq or None, device="cpu" if mode != "load" else "cuda")


@dataclass(frozen=True)
class Job:
    kind: str  # repeat | new | simulate | bad | gated_ok | gated_refused | fits
    data: tuple[object, ...]
    expect_answer: bool
    endpoint: str = "estimate"

    def key(self) -> str:
        return json.dumps(self.data, sort_keys=True)


def plan(requests: int, seed: int) -> list[Job]:
    rng = random.Random(seed)
    jobs: list[Job] = []
    shares = {"repeat": 0.5, "new": 0.1, "simulate": 0.1, "bad": 0.1, "gated_ok": 0.05, "gated_refused": 0.1, "fits": 0.05}
    for kind, share in shares.items():
        for i in range(round(requests * share)):
            if kind == "repeat":
                data = form(rng.choice(POPULAR), ["float32", "float16", "int8", "int4"])
            elif kind == "new":
                data = form(rng.choice(NEW), rng.choice(DTYPE_SETS))
            elif kind == "simulate":  # distinct shapes: each one a new simulation
                data = form("estimator-test/tiny-llama", ["float32"], mode=rng.choice(["inference", "training"]), batch=1 + i % 4, seq=16 + i)
            elif kind == "bad":
                data = form(rng.choice(BAD), ["float32"])
            elif kind == "gated_ok":
                data = form("estimator-test/gated-model", ["float32"], token=APPROVED)
            elif kind == "fits":
                jobs.append(Job(kind, tuple(fits_inputs(**rng.choice(FITS_QUERIES))), expect_answer=True, endpoint="what_fits"))
                continue
            else:
                data = form("estimator-test/gated-model", ["float32"], token=rng.choice(["", UNAPPROVED]))
            jobs.append(Job(kind, tuple(data), expect_answer=kind not in ("bad", "gated_refused")))
    rng.shuffle(jobs)
    return jobs[:requests]


@dataclass
class Outcome:
    latencies: dict[str, list[float]] = field(default_factory=dict)
    undocumented: list[str] = field(default_factory=list)
    first: dict[str, str] = field(default_factory=dict)
    mismatched: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


def run_job(url: str, job: Job, session: str, out: Outcome) -> None:
    started = time.perf_counter()
    answer: str | None = None
    problem = None
    try:
        outputs = call(url, list(job.data), session, endpoint=job.endpoint)
        status = str(outputs[0])  # the first output is the status box, in both endpoints
        answer = json.dumps(outputs, sort_keys=True)
        refused = 'class="mme-error"' in status
        if "Internal error" in status:
            problem = f"internal error: {status[:200]}"
        elif job.endpoint == "what_fits" and "fits-summary" not in status:
            problem = f"no table: {status[:200]}"
        elif refused and job.expect_answer:
            problem = f"refused: {status[:200]}"
        elif not refused and not job.expect_answer:
            problem = "answered where a refusal was expected"
        if refused:
            answer = None
    except AppError as exc:
        if job.expect_answer or "Internal error" in str(exc):
            problem = f"error: {str(exc)[:200]}"
    except Exception as exc:  # noqa: BLE001 - a soak test counts failures, it does not stop at one
        problem = f"{type(exc).__name__}: {str(exc)[:200]}"
    elapsed = time.perf_counter() - started
    with out.lock:
        out.latencies.setdefault(job.kind, []).append(elapsed)
        out.counts[job.kind] = out.counts.get(job.kind, 0) + 1
        if problem is not None:
            out.undocumented.append(f"{job.kind} {job.data[0]!r} {job.data[3]} {job.data[4]}: {problem}")
        if answer is not None and job.kind in ("repeat", "gated_ok", "fits"):
            first = out.first.setdefault(job.key(), answer)
            if first != answer:
                out.mismatched.append(f"{job.kind} {job.data[0]!r}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--url", help="an app already running (default: start the stand-in and the app)")
    parser.add_argument("--pid", type=int, help="with --url: the app's process id, for its resident memory")
    parser.add_argument("--smoke", action="store_true", help="a few seconds: 3 users, 12 requests, one model warmed (CI runs this)")
    args = parser.parse_args(argv)
    warm_models: tuple[str, ...] = (*POPULAR, *NEW)
    if args.smoke:
        args.users, args.requests, warm_models = 3, 12, POPULAR[:1]

    procs: list[Any] = []
    if args.url:
        url, pid = args.url, args.pid
    else:
        url, pid, procs = start_stack()
    try:
        out = Outcome()
        for model in warm_models:  # one-time costs (imports, first builds) before the memory baseline
            call(url, form(model, ["float32"]), "warm-up")
        for mode in ("inference", "training"):
            call(url, form("estimator-test/tiny-llama", ["float32"], mode=mode, seq=8), "warm-up")
        call(url, fits_inputs(), "warm-up", endpoint="what_fits")  # pyarrow's dataset reader, the dataset read once
        rss_before = rss_mb(pid) if pid else float("nan")
        jobs = plan(args.requests, args.seed)
        local = threading.local()

        def one(job: Job) -> None:
            if not hasattr(local, "session"):
                local.session = f"user-{threading.get_ident()}"
            run_job(url, job, local.session, out)

        started = time.perf_counter()
        with ThreadPoolExecutor(max_workers=args.users) as pool:
            list(pool.map(one, jobs))
        elapsed = time.perf_counter() - started
        rss_after = rss_mb(pid) if pid else float("nan")
    finally:
        stop_stack(procs)

    figures: dict[str, object] = {
        "users": args.users,
        "requests": len(jobs),
        "by_kind": out.counts,
        "seconds": round(elapsed, 1),
        "undocumented_errors": len(out.undocumented),
        "repeats_not_identical": len(out.mismatched),
        "rss_mb_after_warmup": round(rss_before, 1),
        "rss_mb_after_run": round(rss_after, 1),
        "rss_growth_mb": round(rss_after - rss_before, 1),
        "latency_s": {k: {"n": len(v), "p50": round(percentile(v, 50), 3), "p95": round(percentile(v, 95), 3)} for k, v in out.latencies.items()},
    }
    ok = not out.undocumented and not out.mismatched and not rss_after - rss_before >= TARGET_GROWTH_MB  # NaN (no pid): not measured
    figures["targets_met"] = ok
    print(json.dumps(figures, indent=2))
    for line in (out.undocumented + out.mismatched)[:20]:
        print("problem:", line, file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
