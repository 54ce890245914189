"""A fuzz worker process: runs fuzz cases one by one and says, for each, how it ended.

The worker (``python -m tests._fuzz_worker``, run as a process like the stand-in, never imported
here) starts the Hub stand-in in-process (``tests.hub_server``, the public stand-in), points ``HF_ENDPOINT`` at it before anything imports huggingface_hub, then reads
one JSON case per line on stdin and writes one JSON result per line on stdout:

- ``{"target": "api", "model": ..., "kwargs": {...}}``: ``estimate(model, **kwargs)``;
- ``{"target": "cli", "argv": [...]}``: ``estimator.cli.main(argv)`` (stdout/stderr captured);
- ``{"target": "config", "config": "<config.json text>", "via": "api"|"cli", "kwargs"/"argv"}``:
  the text written to ``config.json`` of a fresh folder, then the API or the CLI on that folder
  (the folder's path replaces ``{dir}`` in ``argv``);
- ``{"target": "header", "prefix_b64": ..., "size": n, "config": {...}, "kwargs": {...}}``: a new
  stand-in repo (a copy of ``estimator-test/tiny-llama``) whose ``model.safetensors`` starts with
  these bytes and is ``size`` bytes long, then ``estimate`` on it through the real client.

Result: ``{"outcome": "answer" | "refusal" | "crash", "detail": ..., "maxrss_kib": ...}``; an
``EstimatorError`` (or CLI exit 0, 2 or 3) is an answer or a documented refusal, anything else
(a traceback, CLI exit 1) a crash with its traceback. ``--case-seconds`` bounds each case with
``SIGALRM`` (a case still running is a crash "timeout"); the parent bounds the worker's wall time
and address space too (:class:`FuzzWorker`), so a hang in C code or a memory blow-up is caught.
"""

from __future__ import annotations

import json
import resource
import select
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent


class FuzzWorker:
    """The parent's handle: a worker under an address-space limit, each case bounded in wall time.

    ``run(case)`` returns the worker's result; a case that outlives ``case_seconds`` + a margin
    kills the worker (result ``crash``, "hang") and the next case starts a fresh one.
    """

    def __init__(self, case_seconds: float = 60.0, memory_bytes: int = 24 << 30, start_seconds: float = 120.0) -> None:
        self.case_seconds, self.memory_bytes, self.start_seconds = case_seconds, memory_bytes, start_seconds
        self.proc: subprocess.Popen[str] | None = None

    def _start(self) -> subprocess.Popen[str]:
        limit = self.memory_bytes

        def cap() -> None:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

        proc = subprocess.Popen(
            [sys.executable, "-m", "tests._fuzz_worker", "--case-seconds", str(self.case_seconds)],
            cwd=REPO_ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, preexec_fn=cap,
            stderr=subprocess.DEVNULL,
        )
        line = self._readline(proc, self.start_seconds)
        if not line or not json.loads(line).get("ready"):
            proc.kill()
            raise RuntimeError(f"fuzz worker did not start: {line!r}")
        return proc

    @staticmethod
    def _readline(proc: subprocess.Popen[str], seconds: float) -> str:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], seconds)
        return proc.stdout.readline() if ready else ""

    def run(self, case: dict[str, Any]) -> dict[str, Any]:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = self._start()
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(case) + "\n")
        self.proc.stdin.flush()
        line = self._readline(self.proc, self.case_seconds + 15)
        if not line:
            code = self.proc.poll()
            self.close()
            why = "hang (killed)" if code is None else f"worker died with status {code} (memory limit or a crash in C)"
            return {"outcome": "crash", "detail": why, "maxrss_kib": 0}
        result: dict[str, Any] = json.loads(line)
        return result

    def close(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            self.proc = None
