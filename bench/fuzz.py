"""The long fuzz run: every target of ``tests/test_fuzz.py`` with the wild strategies, for a time budget.

``python -m bench.fuzz --minutes 10`` cycles through the targets (model references, options of
``parse_options``, share-link queries, then through a bounded worker process the API with any
reference and options, the CLI with any flags, config.json texts by the API and the CLI, and
safetensors headers served by the stand-in), each round a fresh random hypothesis run, until the
time is spent. It prints, per target, the case count and each distinct failure (exception type and
the innermost frame of the project, with the smallest input seen) as Markdown; exit status 1 if any.
The same targets as the suite's version, with more cases and random seeds. ``--smoke``: one round, 20 cases of each
local target and 1 of each target run in the worker process.
"""

from __future__ import annotations

import argparse
import time
import traceback
from collections import Counter
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from estimator.errors import EstimatorError
from estimator.options import parse_options
from estimator.source.reference import parse_reference
from estimator_app.form import from_query, share_link
from testkit import fuzz_strategies as fs
from testkit.fuzz_worker import FuzzWorker

RSS_BUDGET_KIB = 6 * 1024 * 1024
COUNTS: Counter[str] = Counter()
FAILURES: dict[tuple[str, str], str] = {}


def _signature(text: str) -> str:
    """The exception line and the innermost project frame of a traceback (or the detail itself)."""
    lines = [line.strip() for line in text.strip().splitlines()]
    frames = [line for line in lines if line.startswith('File "') and "/estimator" in line]
    return f"{lines[-1][:160] if lines else '?'} @ {frames[-1] if frames else '-'}"


def _record(target: str, detail: str, case: Any) -> None:
    key = (target, _signature(detail))
    shown = repr(case)
    if key not in FAILURES or len(shown) < len(FAILURES[key]):
        FAILURES[key] = shown[:600]


def _local(target: str, fn: Callable[[Any], None]) -> Callable[[Any], None]:
    def run(value: Any) -> None:
        COUNTS[target] += 1
        try:
            fn(value)
        except EstimatorError:
            pass
        except Exception:  # noqa: BLE001 - the finding
            _record(target, traceback.format_exc(), value)

    return run


def _remote(target: str, worker: FuzzWorker, make_case: Callable[[Any], dict[str, Any]]) -> Callable[[Any], None]:
    def run(value: Any) -> None:
        COUNTS[target] += 1
        case = make_case(value)
        result = worker.run(case)
        if result["outcome"] not in ("answer", "refusal"):
            _record(target, result["detail"], case)
        elif result["maxrss_kib"] > RSS_BUDGET_KIB:
            _record(target, f"worker RSS {result['maxrss_kib']} KiB over the budget", case)

    return run


def _round_trip(params: list[tuple[str, str]]) -> None:
    parsed = from_query(params)
    again = from_query(parse_qsl(urlsplit(share_link("http://x/", parsed.state)).query, keep_blank_values=True))
    assert again.state == parsed.state, (parsed.state, again.state)


def targets(worker: FuzzWorker) -> list[tuple[str, st.SearchStrategy[Any], Callable[[Any], None], int]]:
    """(name, strategy, runner, examples per round)."""
    def cfg(v: tuple[str, bool]) -> dict[str, Any]:
        text, via_cli = v
        if via_cli:
            return {"target": "config", "via": "cli", "config": text, "argv": ["{dir}", "--format", "json"]}
        return {"target": "config", "via": "api", "config": text, "kwargs": {}}

    return [
        ("reference", fs.references(), _local("reference", parse_reference), 500),
        ("options", fs.option_kwargs(), _local("options", lambda kw: parse_options(
            **{k: v for k, v in kw.items() if k not in ("cross_check", "revision")})), 500),
        ("share-link query", fs.queries(), _local("share-link query", _round_trip), 500),
        ("api: reference + options", st.tuples(fs.references(), fs.option_kwargs()),
         _remote("api: reference + options", worker, lambda v: {"target": "api", "model": v[0], "kwargs": {"timeout": 5.0, **v[1]}}), 20),
        ("api: served model + options", fs.option_kwargs(),
         _remote("api: served model + options", worker, lambda kw: {"target": "api", "model": fs.TINY, "kwargs": kw}), 20),
        ("cli: flags", fs.cli_argv(), _remote("cli: flags", worker, lambda argv: {"target": "cli", "argv": argv}), 20),
        ("config.json (api, cli)", st.tuples(fs.config_texts(), st.booleans()), _remote("config.json (api, cli)", worker, cfg), 20),
        ("safetensors header (stand-in)", st.tuples(fs.safetensors_prefixes(), st.sampled_from(["load", "inference"])),
         _remote("safetensors header (stand-in)", worker,
                 lambda v: {"target": "header", **v[0], "kwargs": {"mode": v[1], "device": "cpu", "timeout": 5.0}}), 20),
    ]


def main(argv: list[str] | None = None) -> int:
    from bench._smoke import SMOKE_HELP

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = parser.parse_args(argv)
    deadline = time.monotonic() + 60 * args.minutes
    worker = FuzzWorker(case_seconds=30, memory_bytes=24 << 30)
    try:
        while time.monotonic() < deadline:
            for _name, strategy, runner, examples in targets(worker):
                if time.monotonic() >= deadline:
                    break
                if args.smoke:
                    examples = 20 if examples > 20 else 1
                run = settings(max_examples=examples, deadline=None, database=None,
                               suppress_health_check=list(HealthCheck))(given(strategy)(runner))
                run()
            if args.smoke:
                break
    finally:
        worker.close()
    print(f"fuzz run: {'one smoke round' if args.smoke else f'{args.minutes} min'}\n\n| target | cases | distinct failures |\n|---|---|---|")
    for name, count in COUNTS.items():
        print(f"| {name} | {count} | {sum(1 for t, _ in FAILURES if t == name)} |")
    for (target, signature), case in FAILURES.items():
        print(f"\n- **{target}**: `{signature}`\n  smallest input: `{case}`")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    raise SystemExit(main())
