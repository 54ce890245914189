"""Admission: how many requests run at once, and the two lanes that keep repeats fast.

Up to ``workers`` requests run at once (Gradio's queue, bounded at ``queue_size`` waiting; past it
Gradio says busy), but only ``builders`` of them may build a model the app has not answered
before; a repeat (answered from the core's cache by commit) never waits behind a heavy build.
Settings come from ``ESTIMATOR_APP_WORKERS``, ``ESTIMATOR_APP_BUILDERS`` and
``ESTIMATOR_APP_QUEUE_SIZE``, read when the page is built, not at import.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from estimator.cache import LRUCache

T = TypeVar("T")


@dataclass(frozen=True)
class Settings:
    """The page's concurrency settings."""

    workers: int
    builders: int
    queue_size: int

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ
        default_builders = max(1, (os.cpu_count() or 2) - 1)  # a core left for repeats
        return cls(
            workers=int(env.get("ESTIMATOR_APP_WORKERS") or 8),
            builders=int(env.get("ESTIMATOR_APP_BUILDERS") or default_builders),
            queue_size=int(env.get("ESTIMATOR_APP_QUEUE_SIZE") or 64),
        )


class Lanes:
    """A bounded builder lane for requests not answered before, and a free lane for repeats.

    Keys are the request (model, revision, options); never a token. The lanes remember only that
    a request was answered, never the answer: ``work()`` (the core, with its access check) runs
    for every request, so a repeat of a gated repo's request by a visitor without access is
    refused as fast as it is answered to one with access, and gives nothing away.
    """

    def __init__(self, builders: int, remembered: int = 4096) -> None:
        self._builders = threading.BoundedSemaphore(builders)
        self._answered: LRUCache[bool] = LRUCache(remembered)

    def run(self, key: Hashable, work: Callable[[], T], *, admitted: Callable[[], None] = lambda: None) -> T:
        """``work()``, in the builder lane unless ``key`` was answered before; ``admitted()`` once it may start building."""
        if self._answered.get(key):
            return work()
        with self._builders:
            admitted()
            result = work()
        self._answered.put(key, True)
        return result


@functools.cache
def lanes() -> Lanes:
    """The process's lanes, sized from the environment on first use."""
    return Lanes(Settings.from_env().builders)
