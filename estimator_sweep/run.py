"""``sweep()``: many references x one grid -> a Parquet dataset, on Ray. The driver's side.

The driver reads what ``out`` already holds (each part's commit and grid, from its metadata),
hands one task per reference to Ray (the task skips itself when its commit is already answered),
writes each task's rows as one part, atomically, and keeps a progress line on stderr. A job Ray
reports as failed (its worker died past the retries, or it ran past its deadline) still ends as
rows, with the error.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

from estimator_sweep.card import write_card
from estimator_sweep.engine import Job, Outcome, Session, run_jobs
from estimator_sweep.grid import Grid
from estimator_sweep.rows import error_rows
from estimator_sweep.store import part_key, read_parts, write_part
from estimator_sweep.task import Limits, TaskResult, run_task


@dataclass
class SweepReport:
    """What a sweep did: references asked, parts computed or skipped, rows written, failures."""

    out: Path
    requested: int = 0
    computed: int = 0
    skipped: int = 0
    rows_written: int = 0
    failed_rows: int = 0
    failed_tasks: list[str] = field(default_factory=list)
    seconds: float = 0.0
    workers: int = 0


class Progress:
    """``done / failed / skipped / remaining`` on one stderr line (tqdm), or nothing."""

    def __init__(self, total: int, stream: TextIO | None) -> None:
        self.bar: Any = None
        self.done = self.failed = self.skipped = 0
        self.total = total
        if stream is not None:
            from tqdm import tqdm

            self.bar = tqdm(total=total, file=stream, unit="model", dynamic_ncols=True, smoothing=0.1)
            self._show()

    def _show(self) -> None:
        remaining = self.total - self.done - self.skipped
        self.bar.set_postfix_str(f"done {self.done}, failed {self.failed}, skipped {self.skipped}, remaining {remaining}", refresh=False)

    def step(self, *, skipped: bool, failed: bool) -> None:
        if skipped:
            self.skipped += 1
        else:
            self.done += 1
            self.failed += int(failed)
        if self.bar is not None:
            self._show()
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _normalize(references: Iterable[str]) -> list[str]:
    """Each reference once, in order; local folders made absolute (a worker may run elsewhere)."""
    seen: dict[str, None] = {}
    for raw in references:
        text = str(raw).strip()
        if not text or text.startswith("#"):
            continue
        path = Path(text).expanduser()
        if "://" not in text and path.exists():
            text = str(path.resolve())
        seen.setdefault(text, None)
    return list(seen)


def _failure_rows(outcome: Outcome, grid: Grid) -> list[dict[str, Any]]:
    reference = outcome.job.args[0]
    assert outcome.error is not None and outcome.kind is not None
    return [r for s in grid.scenarios() for r in error_rows(outcome.error, outcome.kind, reference=reference, model=None, revision=None,
                                                            source=None, grid=grid, scenario=s, dtypes=grid.row_dtypes, task=outcome.job.key,
                                                            seconds=outcome.job.deadline_s)]


def sweep(
    references: Iterable[str], *, out: str | Path, grid: Grid | None = None, workers: int | None = None, ray_address: str | None = None,
    limits: Limits | None = None, retry_failed: bool = False, max_retries: int = 3, progress: TextIO | None = sys.stderr,
) -> SweepReport:
    """Estimate every reference under every scenario of ``grid`` on Ray; rows go to ``out/data/*.parquet``.

    ``workers``: CPUs of the local Ray instance (default: every core); ignored with ``ray_address``
    (or ``RAY_ADDRESS``), the cluster to join. ``limits``: per-estimate time and address-space caps
    and Hub retries. A rerun over the same ``out`` skips references whose part answers their
    current commit for this grid (unless it holds Hub or limit errors, or ``retry_failed``).
    Returns a :class:`SweepReport`; the rows are read back with :func:`estimator_sweep.read_dataset`.
    """
    started = time.monotonic()
    grid = grid or Grid()
    limits = limits or Limits()
    grid.check()
    out = Path(out)
    refs = _normalize(references)
    grid_key = grid.key()
    existing = read_parts(out)
    jobs = []
    calls = len(grid.scenarios()) * (1 + len(grid.row_dtypes))
    deadline = limits.seconds * calls + 60 * (1 + limits.hub_retries)
    for reference in refs:
        key = part_key(reference, grid_key)
        part = existing.get(key)
        keep = part is not None and part.grid_key == grid_key and not part.transient and not (retry_failed and part.failed)
        done_state = part.state if keep and part is not None else None
        jobs.append(Job(key=key, args=(reference, grid), kwargs={"task": key, "done_state": done_state, "limits": limits}, deadline_s=deadline))
    report = SweepReport(out=out, requested=len(refs))
    session = Session(address=ray_address, workers=workers, memory_bytes=limits.memory_bytes)
    report.workers = session.workers
    bar = Progress(len(jobs), progress)
    try:
        for outcome in run_jobs(run_task, jobs, window=session.workers, max_retries=max_retries):
            result: TaskResult | None = outcome.value
            if result is not None and result.skipped:
                report.skipped += 1
                bar.step(skipped=True, failed=False)
                continue
            if result is not None:
                rows, state = result.rows, result.state
            else:
                rows, state = _failure_rows(outcome, grid), None
                report.failed_tasks.append(outcome.job.args[0])
            write_part(out, outcome.job.key, rows, reference=outcome.job.args[0], state=state, grid_key=grid_key)
            failed = sum(1 for r in rows if r["error"] is not None)
            report.computed += 1
            report.rows_written += len(rows)
            report.failed_rows += failed
            bar.step(skipped=False, failed=failed > 0)
    finally:
        bar.close()
        session.close()
    write_card(out, grid)
    report.seconds = time.monotonic() - started
    return replace(report)
