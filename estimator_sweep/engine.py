"""Ray, and only here: start or join a cluster, run tasks in a window, retry, cancel, report.

Locally, :func:`connect` starts a private Ray instance (``address="local"``, never another
person's cluster found on the machine) with ``num_cpus`` workers and a small object store;
with an address (``--ray-address``, else ``RAY_ADDRESS``) it joins that cluster. A task that
raises inside is already a row (:mod:`estimator_sweep.task`); what Ray itself reports — a worker
that died more than ``max_retries`` times, a task cancelled past its deadline — the driver turns
into error rows through ``on_failure``.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

# Environment a worker needs to reach the same Hub as the driver (a token is never passed: workers use their own).
FORWARDED_ENV = ("HF_ENDPOINT", "HF_HUB_OFFLINE", "HF_HUB_ETAG_TIMEOUT", "HF_HUB_DOWNLOAD_TIMEOUT", "HF_HOME", "HF_HUB_CACHE")


@dataclass(frozen=True)
class Job:
    """One task to run: its key, its arguments, and the seconds after which the driver kills it."""

    key: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    deadline_s: float


@dataclass(frozen=True)
class Outcome:
    """A job's end: its value, or the exception Ray raised for it (``kind`` "limit" or "bug")."""

    job: Job
    value: Any = None
    error: str | None = None
    kind: str | None = None


class Session:
    """A connection to Ray: started here (and stopped by :meth:`close`) or joined."""

    def __init__(self, *, address: str | None, workers: int | None, memory_bytes: int | None) -> None:
        import ray

        self.started = False
        env = {name: os.environ[name] for name in FORWARDED_ENV if name in os.environ}
        runtime_env = {"env_vars": env} if env else None
        address = address or os.environ.get("RAY_ADDRESS") or None
        if ray.is_initialized():  # a caller's own session (tests, notebooks): used as is
            pass
        elif address:
            ray.init(address=address, runtime_env=runtime_env, log_to_driver=False, configure_logging=False)
        else:
            cpus = workers or os.cpu_count() or 1
            extra: dict[str, Any] = {"_memory": cpus * memory_bytes} if memory_bytes else {}
            ray.init(address="local", num_cpus=cpus, include_dashboard=False, object_store_memory=128 * 2**20, runtime_env=runtime_env,
                     log_to_driver=False, configure_logging=False, **extra)
            self.started = True
        self.workers = int(ray.cluster_resources().get("CPU", 1)) if workers is None or address else workers

    def close(self) -> None:
        import ray

        if self.started:
            ray.shutdown()


def _remote(fn: Callable[..., Any], max_retries: int) -> Any:
    import ray

    return ray.remote(num_cpus=1, max_retries=max_retries, retry_exceptions=False)(fn)


def run_jobs(fn: Callable[..., Any], jobs: Iterable[Job], *, window: int, max_retries: int = 3, poll_s: float = 0.5) -> Iterator[Outcome]:
    """Run ``fn(*job.args, **job.kwargs)`` for every job, at most ``window`` at a time, yielding as each ends.

    A job still running ``deadline_s`` after it was handed a slot is cancelled with ``force=True``
    (its worker process is killed; Ray starts another) and reported as a "limit" failure. A worker
    that dies is Ray's to retry, ``max_retries`` times.
    """
    import ray
    from ray.exceptions import GetTimeoutError, RayError, TaskCancelledError, WorkerCrashedError

    remote = _remote(fn, max_retries)
    pending = iter(jobs)
    running: dict[Any, tuple[Job, float]] = {}
    cancelled: set[Any] = set()
    exhausted = False
    while True:
        while not exhausted and len(running) < window:
            job = next(pending, None)
            if job is None:
                exhausted = True
                break
            running[remote.remote(*job.args, **job.kwargs)] = (job, time.monotonic())
        if not running:
            return
        ready, _ = ray.wait(list(running), num_returns=1, timeout=poll_s)
        for ref in ready:
            job, _started = running.pop(ref)
            try:
                yield Outcome(job, value=ray.get(ref))
            except TaskCancelledError:
                yield Outcome(job, error=f"Killed after {job.deadline_s:g} s, the task's deadline; give the sweep more --task-timeout.", kind="limit")
            except WorkerCrashedError as exc:
                yield Outcome(job, error=f"The worker died {max_retries + 1} times running this task ({type(exc).__name__}).", kind="limit")
            except (RayError, GetTimeoutError) as exc:
                cause = getattr(exc, "cause", None) or exc
                yield Outcome(job, error=f"The task failed in Ray: {type(cause).__name__}: {str(cause).splitlines()[0][:300] if str(cause) else ''}",
                              kind="limit" if "OutOfMemory" in type(exc).__name__ else "bug")
            cancelled.discard(ref)
        now = time.monotonic()
        for ref, (job, started) in list(running.items()):
            if ref not in cancelled and now - started > job.deadline_s:
                logger.warning("cancelling %s after %.0f s", job.key, now - started)
                ray.cancel(ref, force=True, recursive=True)
                cancelled.add(ref)
