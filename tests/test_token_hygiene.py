"""A token never leaves the request: not in a log line, an output, an error, a download, a share
link, a cache key or a posted discussion.

For each way a user gives a token — the CLI's ``--token``, ``HF_TOKEN``, the login cache
(``HF_HOME/token``) and the app's form — a subprocess (``tests/_drive_token_hygiene.py``) talks to
the Hub stand-in with the stand-in's approved token (so gated and private repos answer: the token
was really used) and with a made-up one (so refusals are worded), logging at DEBUG, then returns
the text of every place the token must not reach. The test looks for both tokens in all of it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from testkit.hub_process import hub_env
from tests._drive_token_hygiene import GOOD, MADE_UP

REPO_ROOT = Path(__file__).resolve().parent.parent


def _drive(hub_server: str, tmp_path: Path, source: str) -> dict[str, Any]:
    home = tmp_path / "hf_home"
    home.mkdir()
    extra = {"TOKEN_SOURCE": source, "HF_HUB_DISABLE_IMPLICIT_TOKEN": ""}
    if source == "env":
        extra["HF_TOKEN"] = GOOD
    if source == "login":
        (home / "token").write_text(GOOD)
    env = hub_env(hub_server, home, **extra)
    if source != "app":
        env.pop("HF_HUB_DISABLE_IMPLICIT_TOKEN")
    done = subprocess.run(
        [sys.executable, "-m", "tests._drive_token_hygiene"], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout)
    result["places"]["subprocess stderr"] = done.stderr
    return result


@pytest.mark.parametrize("source", ["cli", "env", "login", "app"])
def test_no_token_anywhere(hub_server: str, tmp_path: Path, source: str) -> None:
    result = _drive(hub_server, tmp_path, source)
    answers, places = result["answers"], result["places"]
    # The token was used: the gated repo answered (CLI exit 0, API/app an answer).
    assert answers["gated"] in (0, "answer"), (answers, places)
    assert answers["log line count"] > 0  # DEBUG logging was on and captured
    leaks = {name: text for name, text in places.items() for token in (GOOD, MADE_UP) if token in text}
    assert not leaks, {name: text[max(0, text.find(GOOD) - 200):][:600] for name, text in leaks.items()}
    if source == "app":
        assert answers["posted"] >= 1  # a discussion was posted, and its body is among the places
        assert "download csv" in places and "share link" in places
