"""What the quantized accuracy benches share (``bench/quant_accuracy.py``, ``bench/prequant_accuracy.py``,
``bench/prequant_lora_accuracy.py``): their command line, the truth-vs-simulation runs, and the page they write, a
truth-vs-simulation row per (case, kind)."""

from __future__ import annotations

import argparse
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from bench._smoke import SMOKE_HELP
from testkit.peak_pool import run_truth_jobs

TABLE_HEAD = ["| case | kind | measured bytes | simulated bytes | error |", "|---|---|---:|---:|---:|"]


def truth_rows(pairs: Iterable[tuple[str, str]], found: dict[tuple[str, str, str], Any]) -> tuple[list[str], float]:
    """Markdown rows ``| case | kind | measured | simulated | error |`` for each pair of ``found`` (keyed
    ``("truth" | "sim", case, kind)``, as :func:`testkit.peak_pool.run_truth_jobs` returns them), a failed side named
    in its row; and the worst absolute error of the measured rows."""
    lines, worst = [], 0.0
    for case, kind in pairs:
        truth, sim = found[("truth", case, kind)], found[("sim", case, kind)]
        if not isinstance(truth, dict) or not isinstance(sim, dict) or sim.get("method") != "simulated":
            detail = truth if not isinstance(truth, dict) else sim if not isinstance(sim, dict) else sim["notes"][0]
            lines.append(f"| {case} | {kind} | {truth.get('peak_bytes', '—') if isinstance(truth, dict) else '—'} | — | "
                         f"failed: {str(detail)[:160]} |")
            continue
        error = (sim["peak_bytes"] - truth["peak_bytes"]) / truth["peak_bytes"]
        worst = max(worst, abs(error))
        lines.append(f"| {case} | {kind} | {truth['peak_bytes']:,} | {sim['peak_bytes']:,} | {error:+.2%} |")
    return lines, worst


def truth_bench_main(argv: list[str] | None, *, name: str, doc: str, truth: ModuleType, cases: Sequence[str],
                     keep: Callable[[str, str], bool], title: str, versions: str, about: str = "",
                     notes: Sequence[str] = ()) -> int:
    """The ``main`` of the bench ``bench/<name>.py`` (``doc`` its module docstring): ``--smoke`` simulates
    ``cases[0]`` in the first of ``truth.KINDS`` and writes nothing; otherwise every (case, kind) that ``keep`` allows,
    narrowed by ``--only`` / ``--kinds``, is measured and simulated by the truth module ``truth`` (a module with
    ``KINDS``, ``measure(case, kind)`` and ``simulate(case, kind)``), each in a fresh process, and the page is printed:
    ``# title``, ``versions`` and the command with its seconds, ``about`` (a paragraph, if any), the table, the worst
    error and ``notes``; written to ``--out`` (default ``bench/results/<name>.md``) unless ``--only`` / ``--kinds``
    narrowed the run."""
    warnings.filterwarnings("ignore")
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(f"bench/results/{name}.md"))
    parser.add_argument("--only", default=None)
    parser.add_argument("--kinds", default=None)
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = parser.parse_args(argv)
    if args.smoke:  # one simulation, no measurement, nothing written
        sim = truth.simulate(cases[0], truth.KINDS[0])
        print(f"smoke: {cases[0]} {truth.KINDS[0]} simulated {sim['peak_bytes']:,} B ({sim['method']})")
        return 0 if sim["method"] == "simulated" else 1
    chosen = [c for c in cases if not args.only or c in args.only.split(",")]
    kinds = [k for k in truth.KINDS if not args.kinds or k in args.kinds.split(",")]
    pairs = [(c, k) for c in chosen for k in kinds if keep(c, k)]
    start = time.perf_counter()
    found = run_truth_jobs(truth.__name__, [(side, c, k) for c, k in pairs for side in ("truth", "sim")], processes=2)
    lines = [f"# {title}", "", f"{versions}; `python -m bench.{name}` ({time.perf_counter() - start:.0f} s).", "",
             *([about, ""] if about else []), *TABLE_HEAD]
    rows, worst = truth_rows(pairs, found)
    lines += [*rows, "", f"Worst error: {worst:.2%}.", "", *notes]
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.only and not args.kinds:
        args.out.write_text(text)
    return 0
