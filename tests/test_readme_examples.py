"""The README's command-line example prints, byte for byte, what the README shows."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _examples() -> list[tuple[str, str]]:
    """``(command, expected output)`` of every ``$ estimate-memory ...`` text block in the README."""
    found = []
    for block in re.findall(r"```text\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S):
        first, _, rest = block.partition("\n")
        if first.startswith("$ estimate-memory "):
            found.append((first[2:], rest))
    return found


def test_readme_has_a_cli_example() -> None:
    assert len(_examples()) >= 1


def test_readme_cli_examples_print_the_same_bytes() -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}
    for command, expected in _examples():
        argv = shlex.split(command)
        result = subprocess.run([sys.executable, "-m", "estimator", *argv[1:]], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
        assert result.returncode == 0, result.stderr
        # A local folder is shown as it was given (the README's, from the repo root), so the bytes are the same everywhere.
        assert result.stdout == expected, command
