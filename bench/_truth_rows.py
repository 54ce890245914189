"""The rows of an accuracy table: a truth-vs-simulation pair per (case, kind), as the quantized benches print them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


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
