"""Several ``estimate-memory`` answers from one real subprocess: the CLI's ``main()`` on each argv in turn, each
answer's stdout, stderr and exit status kept apart, the imports paid once.

For answers that do not depend on a fresh process (the formats or spellings of one request); what does (a library's
warn-once warnings, a start-up's time, the garbage collector's setting) keeps one process per run.

:func:`start_each` starts that subprocess and returns at once, so a test module can run its ground truths (a
``testkit.peak_pool`` pool) or its in-process work while the answers are computed; :func:`run_each` waits for them.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping

from testkit.hub_process import REPO_ROOT

_EACH = ("import contextlib, io, json, sys\nfrom estimator.cli import main\nanswers = []\n"
         "for argv in json.loads(sys.argv[1]):\n"
         "    out, err = io.StringIO(), io.StringIO()\n"
         "    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):\n"
         "        status = main(argv)\n"
         "    answers.append([status, out.getvalue(), err.getvalue()])\n"
         "print(json.dumps(answers))\n")


class Started:
    """The subprocess of :func:`start_each`: :meth:`wait` gives its answers; :meth:`stop` ends it if no one waited."""

    def __init__(self, argvs: tuple[tuple[str, ...], ...], env: Mapping[str, str], timeout: float) -> None:
        self.argvs = argvs
        # output to temporary files, so a long answer never blocks on a full pipe while the caller does other work
        self._out, self._err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")  # noqa: SIM115 - closed by wait/stop
        self._proc = subprocess.Popen([sys.executable, "-c", _EACH, json.dumps(argvs)], stdout=self._out, stderr=self._err, text=True,
                                      cwd=REPO_ROOT, env=dict(env))
        self._deadline = time.monotonic() + timeout
        self._answers: list[subprocess.CompletedProcess[str]] | None = None

    def wait(self) -> list[subprocess.CompletedProcess[str]]:
        """One ``CompletedProcess`` per argv, as if each had been its own ``python -m estimator`` run."""
        if self._answers is None:
            try:
                returncode = self._proc.wait(timeout=max(0.0, self._deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.stop()
                raise
            with self._out, self._err:
                self._out.seek(0)
                self._err.seek(0)
                stdout, stderr = self._out.read(), self._err.read()
            assert returncode == 0, stderr
            self._answers = [subprocess.CompletedProcess(list(argv), status, answer, warned)
                             for argv, (status, answer, warned) in zip(self.argvs, json.loads(stdout.splitlines()[-1]), strict=True)]
        return self._answers

    def stop(self) -> None:
        """Kill the subprocess if it still runs (its answers were not needed) and close its files."""
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        self._out.close()
        self._err.close()


def start_each(*argvs: tuple[str, ...], env: Mapping[str, str], timeout: float = 300) -> Started:
    """Start the subprocess answering every argv (as :func:`run_each`) and return without waiting: ``.wait()`` gives the
    answers (``timeout``: seconds for them all, counted from the start), ``.stop()`` ends it unread."""
    return Started(argvs, env, timeout)


def run_each(*argvs: tuple[str, ...], env: Mapping[str, str], timeout: float = 300) -> list[subprocess.CompletedProcess[str]]:
    """One ``CompletedProcess`` per argv, as if each had been its own ``python -m estimator`` run (``timeout``: seconds
    for them all)."""
    return start_each(*argvs, env=env, timeout=timeout).wait()
