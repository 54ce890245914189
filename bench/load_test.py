"""Load test: concurrent users asking the app for cached and uncached models, over Gradio's HTTP API.

Each request is what ``gradio_client`` sends, with the standard library: ``POST
/gradio_api/call/estimate`` and reading the event's stream until ``complete`` or ``error``
(``gradio_client`` itself costs about 0.3 s of client CPU per call, which on a small machine
would measure the client, not the app).

By default it starts the Hub stand-in (``python -m tests.hub_server --port 0``) and the app
(``python app.py``) on loopback, so it needs nothing outside the machine::

    python bench/load_test.py                       # 20 users, 1,000 requests, 10% uncached, 10% to the fits tab
    python bench/load_test.py --url http://127.0.0.1:7860/ --pid 1234   # an app already running
    python bench/load_test.py --smoke               # seconds: 2 users, 6 requests (CI)

"Cached" requests repeat a model and options the app has answered before (the core caches Hub
answers by commit, so only the model-info call and rendering remain); "uncached" ones ask for a
model and dtype set not asked before (safetensors headers, a meta build for the cross-check); "fits" ones ask
the "What fits my GPU?" tab (``/what_fits``) for a GPU, a use and a dtype over the dataset the app ships.
It prints p50 / p95 / max latency of each kind, throughput, and the app's resident memory (VmRSS)
after warm-up and after the run; the exit status is 1 when a target is missed (p95 of cached
answers under 2 s, memory growth under 100 MB) or a request failed.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import select
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
CACHED_MODELS = ("openai-community/gpt2", "google-bert/bert-base-cased", "meta-llama/Llama-3.1-8B")
UNCACHED_MODELS = (
    "openai-community/gpt2",
    "google-bert/bert-base-cased",
    "FacebookAI/roberta-base",
    "timm/resnet50.a1_in1k",
    "estimator-test/tiny-llama",
    "google/gemma-2b-it",
    "meta-llama/Llama-3.1-8B",
)
DTYPES = ("float32", "float16", "bfloat16", "int8", "int4")
DEFAULT_DTYPES = ["float32", "float16", "int8", "int4"]
TARGET_CACHED_P95_S = 2.0
TARGET_GROWTH_MB = 100.0


@dataclass
class Results:
    latencies: dict[str, list[float]] = field(default_factory=lambda: {"cached": [], "uncached": [], "fits": []})
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def rss_mb(pid: int) -> float:
    """Resident set size of ``pid`` and its children (the app may fork helpers), in MiB."""
    total = 0
    pids = [pid]
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        pids += [int(c) for c in children]
    except OSError:
        pass
    for one in pids:
        try:
            for line in Path(f"/proc/{one}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_stack() -> tuple[str, int, list[subprocess.Popen[bytes]]]:
    """Start the Hub stand-in and the app; return the app URL, its pid, and both processes."""
    hub = subprocess.Popen([sys.executable, "-m", "tests.hub_server", "--port", "0"], cwd=ROOT, stdout=subprocess.PIPE)
    assert hub.stdout is not None
    ready, _, _ = select.select([hub.stdout], [], [], 20)
    line = hub.stdout.readline().decode() if ready else ""
    if not line.startswith("ready "):
        hub.kill()
        raise SystemExit(f"hub stand-in did not start: {line!r}")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")}
    env.update(
        HF_ENDPOINT=line.split()[1],
        HF_HOME=tempfile.mkdtemp(prefix="hf_home_bench_"),
        HF_HUB_DISABLE_TELEMETRY="1",
        GRADIO_SERVER_PORT=str(port),
        GRADIO_SERVER_NAME="127.0.0.1",
        GRADIO_ANALYTICS_ENABLED="False",
        ESTIMATOR_APP_QUEUE_SIZE=env.get("ESTIMATOR_APP_QUEUE_SIZE", "64"),
    )
    app = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return url, app.pid, [app, hub]
        except OSError:
            if app.poll() is not None:
                break
            time.sleep(0.5)
    for proc in (app, hub):
        proc.kill()
    raise SystemExit("the app did not start")


def stop_stack(procs: list[subprocess.Popen[bytes]]) -> None:
    """Stop what :func:`start_stack` started (SIGTERM, then SIGKILL after 10 s)."""
    for proc in procs:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def endpoint_inputs(model: str, dtypes: list[str], *, token: str = "", **fields: object) -> list[object]:
    """The ``/estimate`` endpoint's inputs: the form's widgets in :data:`~estimator_app.fields.FIELDS` order, then the
    token field and the last result (none).

    Built from the form itself (:class:`~estimator_app.form.FormState`'s defaults, ``fields`` changed by name, written
    as the widgets hold them by :func:`~estimator_app.form.to_fields`), so a field added to the page is sent with its
    default and this bench cannot fall behind the form.
    """
    from estimator_app.form import FormState, to_fields

    state = FormState(model=model, dtypes=tuple(dtypes), **fields)  # type: ignore[arg-type]  # names checked by the dataclass
    return [*to_fields(state), token, None]


def arguments(model: str, dtypes: list[str]) -> list[object]:
    """The ``/estimate`` endpoint's inputs for a load estimate (the form's defaults elsewhere)."""
    return endpoint_inputs(model, dtypes)


class AppError(Exception):
    """The app answered with an error event (a ``gr.Error`` message)."""


def fits_inputs(gpu: str | None = "RTX 4090", memory: str | None = None, use: str = "load", dtype: str = "bfloat16",
                scenario: str | None = None, text: str = "") -> list[object]:
    """The ``/what_fits`` endpoint's inputs (the "What fits my GPU?" tab), in the order of its link parameters
    (:data:`estimator_app.whatfits.PARAMS`, which the tab's widgets follow)."""
    from estimator_app.whatfits import PARAMS, Query

    query = Query(gpu=gpu, memory=memory, use=use, dtype=dtype, scenario=scenario, filter=text)
    return [getattr(query, name.removeprefix("fits_")) or "" for name in PARAMS]


def call(url: str, data: list[object], session: str | None = None, timeout: float = 600, endpoint: str = "estimate") -> list[object]:
    """One call of the page's API (``/estimate`` by default) over HTTP: submit, then read the event stream to its end.

    ``session`` is the user's Gradio session (a browser keeps one per open page); without one,
    every call is a new session.
    """
    base = url.rstrip("/") + "/gradio_api/call/" + endpoint
    body = {"data": data, **({"session_hash": session} if session else {})}
    request = urllib.request.Request(base, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        event_id = json.loads(response.read())["event_id"]
    with urllib.request.urlopen(f"{base}/{event_id}", timeout=timeout) as response:
        event = ""
        for raw in response:
            line = raw.decode().rstrip("\n")
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: ") and event in ("complete", "error"):
                payload = json.loads(line[6:]) if line[6:] not in ("", "null") else None
                if event == "error":
                    raise AppError(str(payload))
                return payload if isinstance(payload, list) else [payload]
    raise AppError("the stream ended without a result")


FITS_QUERIES = [dict(gpu=gpu, use=use, dtype=dtype) for gpu in ("RTX 4090", "A100 80GB", "L4") for use in ("load", "lora", "full", "inference")
                for dtype in ("bfloat16", "int4")] + [dict(gpu="RTX 4090", memory="16GiB", use="lora", dtype="int4")]  # the size wins


Job = tuple[str, str, list[object], str]  # kind, what is asked (for error lines), the endpoint's inputs, the endpoint


def plan(requests: int, uncached_share: float, seed: int, cached: tuple[str, ...] = CACHED_MODELS, fits_share: float = 0.0) -> list[Job]:
    """``requests`` jobs, shuffled: uncached ones never repeat a (model, dtypes); ``fits_share`` of them ask the
    "What fits my GPU?" tab (``/what_fits``)."""
    rng = random.Random(seed)
    fresh = [
        (model, list(subset))
        for size in (1, 2, 3, 5)
        for subset in itertools.combinations(DTYPES, size)
        for model in UNCACHED_MODELS
        if list(subset) not in (DEFAULT_DTYPES, ["float32"])
    ]
    rng.shuffle(fresh)
    n_uncached = min(int(requests * uncached_share), len(fresh))
    n_fits = int(requests * fits_share)
    jobs: list[Job] = [("uncached", f"{model} {dtypes}", arguments(model, dtypes), "estimate") for model, dtypes in fresh[:n_uncached]]
    for _ in range(n_fits):
        query: dict[str, Any] = rng.choice(FITS_QUERIES)
        jobs.append(("fits", str(query), fits_inputs(**query), "what_fits"))
    for _ in range(requests - n_uncached - n_fits):
        model = rng.choice(cached)
        jobs.append(("cached", f"{model} {DEFAULT_DTYPES}", arguments(model, DEFAULT_DTYPES), "estimate"))
    rng.shuffle(jobs)
    return jobs


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="an app already running (default: start the stand-in and the app)")
    parser.add_argument("--pid", type=int, help="with --url: the app's process id, for its resident memory")
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--uncached-share", type=float, default=0.1)
    parser.add_argument("--fits-share", type=float, default=0.1, help="share of requests to the What fits my GPU? tab (/what_fits)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--smoke", action="store_true", help="a few seconds: 2 users, 6 requests, one model warmed (CI runs this)")
    args = parser.parse_args(argv)
    cached, uncached = CACHED_MODELS, UNCACHED_MODELS
    if args.smoke:
        args.users, args.requests, args.uncached_share, args.fits_share = 2, 6, 0.34, 0.34
        cached, uncached = CACHED_MODELS[:1], ()

    procs: list[subprocess.Popen[bytes]] = []
    if args.url:
        url, pid = args.url, args.pid
    else:
        url, pid, procs = start_stack()
    try:
        results = Results()
        local = threading.local()

        def one(job: Job) -> None:
            kind, asked, data, endpoint = job
            started = time.perf_counter()
            try:
                if not hasattr(local, "session"):
                    local.session = f"user-{threading.get_ident()}"  # one session per simulated user
                answer = call(url, data, local.session, endpoint=endpoint)
                if endpoint == "what_fits" and "fits-summary" not in str(answer[0]):
                    raise AppError(f"no table: {str(answer[0])[:200]}")
            except Exception as exc:  # noqa: BLE001 - a load test counts failures, it does not stop at one
                with results.lock:
                    results.errors.append(f"{asked}: {type(exc).__name__}: {str(exc)[:200]}")
                return
            with results.lock:
                results.latencies[kind].append(time.perf_counter() - started)

        warm = Results()
        for model in cached:  # the cached set, answered once before the clock starts
            started = time.perf_counter()
            call(url, arguments(model, DEFAULT_DTYPES), "warm-up")
            warm.latencies["uncached"].append(time.perf_counter() - started)
        for model in uncached:  # one-time costs (importing each architecture's modeling code) out of the growth
            call(url, arguments(model, ["float32"]), "warm-up")
        if args.fits_share:  # and the fits tab's (pyarrow's dataset reader, the dataset read once)
            call(url, fits_inputs(), "warm-up", endpoint="what_fits")
        rss_before = rss_mb(pid) if pid else float("nan")
        jobs = plan(args.requests, args.uncached_share, args.seed, cached, args.fits_share)
        started = time.perf_counter()
        with ThreadPoolExecutor(max_workers=args.users) as pool:
            list(pool.map(one, jobs))
        elapsed = time.perf_counter() - started
        rss_after = rss_mb(pid) if pid else float("nan")
    finally:
        stop_stack(procs)

    figures = {
        "users": args.users,
        "requests": len(jobs),
        "seconds": round(elapsed, 1),
        "requests_per_second": round(len(jobs) / elapsed, 2),
        "errors": len(results.errors),
        "first_answers_s": [round(x, 2) for x in warm.latencies["uncached"]],
        "rss_mb_after_warmup": round(rss_before, 1),
        "rss_mb_after_run": round(rss_after, 1),
        "rss_growth_mb": round(rss_after - rss_before, 1),
    }
    for kind, values in results.latencies.items():
        figures[kind] = {
            "n": len(values),
            "p50_s": round(statistics.median(values), 3) if values else None,
            "p95_s": round(percentile(values, 95), 3) if values else None,
            "max_s": round(max(values), 3) if values else None,
        }
    ok = (
        not results.errors
        and (figures["cached"]["p95_s"] or 0) < TARGET_CACHED_P95_S
        and not figures["rss_growth_mb"] >= TARGET_GROWTH_MB  # NaN (no pid) passes: not measured
    )
    figures["targets_met"] = ok
    print(json.dumps(figures, indent=2))
    for error in results.errors[:10]:
        print("error:", error, file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
