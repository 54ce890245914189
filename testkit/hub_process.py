"""The loopback Hub stand-in as a process (``python -m tests.hub_server``) and client environments for it.

Shared by the tests (through ``tests/conftest.py``) and the benches; imports nothing from ``tests``.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def start_hub_process(extra_env: dict[str, str] | None = None, timeout: float = 10.0) -> tuple[subprocess.Popen[str], str]:
    """Start ``python -m tests.hub_server --port 0``; return the process and its URL (from the ready line)."""
    env = {**os.environ, **(extra_env or {})}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.hub_server", "--port", "0"],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    line = proc.stdout.readline() if ready else ""
    if not line.startswith("ready http://127.0.0.1:"):
        proc.kill()
        raise RuntimeError(f"hub stand-in did not start: {line!r}")
    return proc, line.split()[1]


def stop_hub_process(proc: subprocess.Popen[str]) -> int:
    """SIGTERM the server and wait; return its exit code."""
    proc.terminate()
    try:
        return proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def hub_env(url: str, home: str | Path | None = None, **extra: str) -> dict[str, str]:
    """Environment for a client subprocess talking to the stand-in at ``url``.

    Sets ``HF_ENDPOINT`` (read once at import by huggingface_hub), a fresh ``HF_HOME`` (a new temp dir
    unless ``home`` is given), ``HF_HUB_DISABLE_TELEMETRY=1``, no progress bars; removes ``HF_TOKEN``,
    ``HUGGING_FACE_HUB_TOKEN`` and ``HF_HUB_OFFLINE``. ``extra`` entries are added last.
    """
    env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE")}
    env.update(
        HF_ENDPOINT=url,
        HF_HOME=str(home) if home is not None else tempfile.mkdtemp(prefix="hf_home_"),
        HF_HUB_DISABLE_TELEMETRY="1",
        HF_HUB_DISABLE_PROGRESS_BARS="1",
    )
    env.update(extra)
    return env
