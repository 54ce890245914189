"""Posting and per-call timeouts through the REAL huggingface_hub client against the loopback stand-in.

The Hub calls run in a subprocess (``tests/_drive_hub_posting.py``; HF_ENDPOINT is read at import).
Checked by what a person sees: discussions found and opened, each refusal translated into an
:mod:`estimator.errors` class with a message to act on and no token in it, timeouts that end within
their bound, and huggingface_hub's process-wide HTTP client left as the library made it.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from huggingface_hub.errors import HfHubHTTPError

from estimator.errors import PostingError
from estimator.source import hub
from testkit.hub_process import REPO_ROOT, hub_env

USER = "hf_standin_user"


def _reset(url: str) -> None:
    request = urllib.request.Request(url + "/_standin/reset", method="POST", data=b"")
    with urllib.request.urlopen(request, timeout=10):
        pass


@pytest.fixture(scope="module")
def results(hub_server: str) -> Iterator[dict[str, Any]]:
    """Every case's outcome; the stand-in's discussions are emptied before and after (other tests count theirs)."""
    _reset(hub_server)
    done = subprocess.run([sys.executable, "-m", "tests._drive_hub_posting"], capture_output=True, text=True, cwd=REPO_ROOT,
                          env=hub_env(hub_server), timeout=300)
    _reset(hub_server)
    assert done.returncode == 0, done.stderr[-3000:]
    outcomes = json.loads(done.stdout.strip().splitlines()[-1])
    assert USER not in done.stdout  # the token is in no message and no result
    yield outcomes


def error(results: dict[str, Any], name: str, cls: str, text: str, exit_status: int) -> dict[str, Any]:
    outcome = results[name]
    assert outcome.get("error") == cls, outcome
    assert text in outcome["message"] and outcome["exit"] == exit_status, outcome
    assert USER not in outcome["message"] and "hf_bogus" not in outcome["message"]
    return outcome


def test_an_estimate_leaves_huggingface_hub_s_client_as_the_library_made_it(results: dict[str, Any]) -> None:
    assert results["estimate"]["ok"] > 0
    assert results["client"]["factory_untouched"] is True
    assert "None" in results["client"]["session_timeout"]  # the shared client's default: no timeout of ours was set on it
    error(results, "estimate_slow", "HubTimeoutError", "did not answer in time", 3)
    assert results["estimate_slow"]["seconds"] < 10


def test_find_and_open_a_discussion(results: dict[str, Any]) -> None:
    assert results["find_none"]["ok"] is None
    num, url = results["open"]["ok"]
    assert url.endswith(f"/google-bert/bert-base-cased/discussions/{num}")
    assert results["find_it"]["ok"] == [num, url]


def test_refusals_are_estimator_errors_without_the_token(results: dict[str, Any]) -> None:
    assert error(results, "open_bad_token", "PostingError", "did not accept the token to open a discussion on", 2)["status"] == 401
    error(results, "open_no_token", "PostingError", "write-discussions", 2)
    error(results, "open_missing_repo", "ModelNotFoundError", "No model 'nobody/no-such-model' on the Hub", 2)
    error(results, "find_rate_limited", "HubRateLimitedError", "rate-limiting", 3)
    error(results, "find_server_error", "HubError", "HTTP 503", 3)


def test_discussion_calls_time_out_per_call(results: dict[str, Any]) -> None:
    for name in ("find_slow", "open_slow"):
        error(results, name, "HubTimeoutError", "did not answer in time", 3)
        assert results[name]["seconds"] < 10


def test_the_app_s_posting_flow_through_the_real_client(results: dict[str, Any]) -> None:
    assert results["publish"]["ok"].startswith("Posted: [")
    assert "already has this discussion" in results["publish_again"]["ok"]
    assert "already has this discussion" in results["preview"]["ok"]
    error(results, "publish_anonymous", "PostingError", "Sign in with Hugging Face", 2)


def test_a_forbidden_token_names_the_permission_posting_needs() -> None:
    response = httpx2.Response(403, request=httpx2.Request("POST", "http://127.0.0.1/api/models/a/b/discussions"))
    translated = hub.hub_errors("a/b", None, token_given=True, posting="open a discussion on")
    with pytest.raises(PostingError, match="needs the write-discussions permission") as caught, translated:
        raise HfHubHTTPError("403 Forbidden", response=response)
    assert caught.value.status == 403 and caught.value.model_id == "a/b"


def test_no_private_huggingface_hub_module_is_imported() -> None:
    """The package uses huggingface_hub's public API only: no ``huggingface_hub.<...>._private`` import anywhere."""
    for path in [*REPO_ROOT.joinpath("estimator").rglob("*.py"), *REPO_ROOT.joinpath("estimator_app").rglob("*.py"), REPO_ROOT / "app.py"]:
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            for name in names:
                if name.startswith("huggingface_hub"):
                    assert not any(part.startswith("_") for part in name.split(".")), f"{path}: {name}"
