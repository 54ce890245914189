"""One sweep task: one reference at its current commit, every scenario of the grid. No Ray here.

:func:`run_task` resolves the reference to its commit (Hub: ``model_info``'s sha, retried with
backoff on 429, 5xx and timeouts; a local folder: a digest of its small files), returns at once
when that commit was already answered for this grid (the resume), and otherwise calls
:func:`estimator.estimate` once per scenario, pinned to that commit, under a time and a memory
limit. Whatever happens, every (scenario, dtype) comes back as a row: failures are rows with the
message a user of the CLI would read.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import resource
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from estimator.api import estimate
from estimator.errors import HubError
from estimator.messages import user_message
from estimator.source.reference import ModelRef, parse_reference
from estimator_sweep.grid import Grid, Scenario
from estimator_sweep.rows import TRANSIENT, error_rows, estimate_rows

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Limits:
    """What one task may take: seconds per ``estimate()`` call, bytes of address space, Hub retries."""

    seconds: float = 300.0
    memory_bytes: int | None = 6 * 2**30
    hub_retries: int = 4
    backoff_s: float = 1.0  # doubled after each retry: 1, 2, 4, 8 s
    timeout: float = 10.0  # each Hub call


@dataclass
class TaskResult:
    """What a task hands back to the driver: its rows, or that its part is already there."""

    reference: str
    # the commit answered: a sha, "local:<digest>" for a folder, "absent:<error>" for a repo the Hub says does
    # not exist (or cannot be read); None when the Hub kept failing (a rerun tries again)
    state: str | None
    skipped: bool = False
    rows: list[dict[str, Any]] = field(default_factory=list)

    @property
    def failed(self) -> int:
        return sum(1 for r in self.rows if r["error"] is not None)

    @property
    def transient(self) -> bool:
        return any(r["error_kind"] in TRANSIENT for r in self.rows)


class OverTime(BaseException):
    """Raised in the task when an estimate runs past its time (a BaseException so no ``except Exception`` swallows it)."""


def _kind(status: int) -> str:
    return {2: "refused", 3: "hub"}.get(status, "bug")


def describe(exc: BaseException) -> tuple[str, str]:
    """``(message, error_kind)`` of a failure, worded as the CLI words it (a bug also names its cause)."""
    if isinstance(exc, OverTime):
        return str(exc), "limit"
    if isinstance(exc, MemoryError):
        return "Ran past the task's memory limit (MemoryError); give the sweep more --task-memory.", "limit"
    message, status = user_message(exc)
    if status == 1 and str(exc):
        message = f"{message} ({str(exc)[:300]})"
    return message, _kind(status)


@contextlib.contextmanager
def limited(limits: Limits) -> Iterator[None]:
    """Run the body under ``limits``: SIGALRM after ``seconds``, RLIMIT_AS at ``memory_bytes``.

    The alarm works where the task runs on the process's main thread (Ray runs a task there); the
    driver's own deadline kills a worker the alarm cannot interrupt.
    """
    use_alarm = hasattr(signal, "SIGALRM") and limits.seconds > 0
    try:
        use_alarm = use_alarm and signal.getsignal(signal.SIGALRM) is not None and _main_thread()
    except ValueError:
        use_alarm = False
    old_handler: Any = None
    if use_alarm:
        def _alarm(_signum: int, _frame: object) -> None:
            raise OverTime(f"Ran past the task's time limit of {limits.seconds:g} s; give the sweep more --task-timeout.")

        old_handler = signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, limits.seconds)
    old_limit = resource.getrlimit(resource.RLIMIT_AS)
    if limits.memory_bytes is not None:
        hard = old_limit[1]
        soft = limits.memory_bytes if hard == resource.RLIM_INFINITY else min(limits.memory_bytes, hard)
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    try:
        yield
    finally:
        if use_alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old_handler)
        if limits.memory_bytes is not None:
            resource.setrlimit(resource.RLIMIT_AS, old_limit)


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _transient_hub(exc: BaseException) -> bool:
    """429, 5xx, timeouts and dropped connections: worth another try."""
    import httpx
    from huggingface_hub.errors import HfHubHTTPError

    if isinstance(exc, HubError):
        return True
    if isinstance(exc, HfHubHTTPError):
        status = getattr(exc.response, "status_code", None)
        return status == 429 or (status is not None and status >= 500)
    return isinstance(exc, httpx.TransportError | TimeoutError | ConnectionError)


def with_retries(call: Callable[[], Any], limits: Limits, sleep: Callable[[float], None] = time.sleep) -> Any:
    """``call()``, retried ``limits.hub_retries`` times with doubling backoff while the Hub faults."""
    delay = limits.backoff_s
    for attempt in range(limits.hub_retries + 1):
        try:
            return call()
        except Exception as exc:
            if attempt == limits.hub_retries or not _transient_hub(exc):
                raise
            logger.info("Hub fault (%s); retry %d in %.1f s", type(exc).__name__, attempt + 1, delay)
            sleep(delay)
            delay *= 2
    raise AssertionError("unreachable")


def folder_digest(path: Path) -> str:
    """A local folder's state: sha256 over its small files' contents and every file's name and size."""
    digest = hashlib.sha256()
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        size = file.stat().st_size
        digest.update(f"{file.relative_to(path)}\0{size}\0".encode())
        if size <= 1 << 20:
            digest.update(file.read_bytes())
    return "local:" + digest.hexdigest()


def resolve(ref: ModelRef, limits: Limits) -> tuple[str | None, str | None]:
    """``(state, sha)``: the commit the reference points at now (``None`` when the Hub will not say)."""
    if ref.path is not None:
        return folder_digest(ref.path), None
    from huggingface_hub import HfApi

    try:
        info = with_retries(lambda: HfApi().model_info(ref.repo_id or "", revision=ref.revision, timeout=limits.timeout), limits)
    except Exception as exc:  # not found, or the Hub kept failing: estimate() words it (or answers from the catalog)
        logger.info("could not resolve %s (%s)", ref.display, type(exc).__name__)
        # no such repo or revision is a state a rerun may skip; a Hub that kept failing is not
        return (None if _transient_hub(exc) else f"absent:{type(exc).__name__}"), None
    return (info.sha, info.sha) if info.sha else (None, None)


def _run_scenario(reference: str, ref: ModelRef, sha: str | None, grid: Grid, scenario: Scenario, limits: Limits, task: str) -> list[dict[str, Any]]:
    """Rows for one scenario: all dtypes in one call; on a refusal, dtype by dtype, so one refused dtype blanks no other."""
    started = time.monotonic()
    kwargs = grid.estimate_kwargs(scenario)
    kwargs["timeout"] = limits.timeout
    try:
        with limited(limits):
            result = with_retries(lambda: estimate(ref, revision=sha, **kwargs), limits)
        return estimate_rows(result, reference=reference, grid=grid, scenario=scenario, task=task, seconds=time.monotonic() - started)
    except BaseException as exc:  # every failure becomes rows; the interrupt from the driver (KeyboardInterrupt) too would lose the task
        if isinstance(exc, KeyboardInterrupt | SystemExit):
            raise
        message, kind = describe(exc)
    if kind == "refused" and len(grid.row_dtypes) > 1 and grid.dtypes is not None:
        rows: list[dict[str, Any]] = []
        for dtype in grid.row_dtypes:
            single = replace(grid, dtypes=(dtype,))
            rows += _run_scenario(reference, ref, sha, single, scenario, limits, task)
        for row in rows:  # the row's link names the dtype alone either way
            row["task"] = task
        return rows
    return error_rows(message, kind, reference=reference, model=ref.display, revision=sha, source="local" if ref.path else "hub", grid=grid,
                      scenario=scenario, dtypes=grid.row_dtypes, task=task, seconds=time.monotonic() - started)


def run_task(reference: str, grid: Grid, *, task: str, done_state: str | None = None, limits: Limits | None = None) -> TaskResult:
    """Every scenario of ``grid`` for ``reference``; ``done_state`` is the commit its part already answers."""
    limits = limits or Limits()
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    try:
        from huggingface_hub import constants

        ref = parse_reference(reference, endpoint=constants.ENDPOINT if "://" in reference else None)  # a URL of HF_ENDPOINT too, as estimate()
    except Exception as exc:
        message, kind = describe(exc)
        rows = [r for s in grid.scenarios() for r in error_rows(message, kind, reference=reference, model=None, revision=None, source=None,
                                                                grid=grid, scenario=s, dtypes=grid.row_dtypes, task=task, seconds=0.0)]
        return TaskResult(reference=reference, state=None, rows=rows)
    state, sha = resolve(ref, limits)
    if state is not None and state == done_state:
        return TaskResult(reference=reference, state=state, skipped=True)
    rows = [r for s in grid.scenarios() for r in _run_scenario(reference, ref, sha, grid, s, limits, task)]
    return TaskResult(reference=reference, state=state, rows=rows)
