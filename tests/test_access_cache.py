"""Cached answers and access: a gated or private repo's answer only for a caller just shown to have access.

Issue 18, defect 1: in one process (as the app serves its visitors), an approved visitor's answer for
a gated repo was served from the cache to the next visitors, anonymous or not approved. Driven through
the real ``huggingface_hub`` client against the Hub stand-in (tests/hub_server.py: ``gated-model`` is
``gated: "manual"`` with a public model_info; ``hf_standin_user`` is approved, ``hf_standin_unapproved``
is not), once through ``estimator.estimate`` and once through the page's handlers, in a subprocess
because huggingface_hub reads ``HF_ENDPOINT`` at import.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from testkit.hub_process import REPO_ROOT, hub_env

USER, UNAPPROVED = "hf_standin_user", "hf_standin_unapproved"
GATED, PRIVATE, PUBLIC = "estimator-test/gated-model", "estimator-test/private-model", "estimator-test/tiny-llama"


def drive(url: str, cases: list[dict[str, Any]], tmp_path: Path) -> dict[str, Any]:
    env = hub_env(url, tmp_path / "hf_home", TMPDIR=str(tmp_path))
    done = subprocess.run(
        [sys.executable, "-m", "tests._drive_access"], input=json.dumps(cases), capture_output=True, text=True,
        cwd=REPO_ROOT, env=env, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def visitors(via: str, model: str, **kwargs: Any) -> list[dict[str, Any]]:
    """Approved, then anonymous, then not approved, then approved again: the same request each time."""
    return [{"via": via, "model": model, "token": token, "kwargs": kwargs} for token in (USER, None, UNAPPROVED, USER)]


@pytest.fixture(scope="module")
def core(hub_server: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    cases = [
        *visitors("core", GATED, dtypes=["float32"]),
        # a request not asked before (a cache miss) built from config.json alone, which the client's
        # own file cache holds since the approved visitor's request
        {"via": "core", "model": GATED, "token": UNAPPROVED, "kwargs": {"dtypes": ["float8"]}},
        {"via": "core", "model": GATED, "token": None, "kwargs": {"dtypes": ["float8"]}},
        *visitors("core", PRIVATE, dtypes=["float32"]),
        {"via": "core", "model": PUBLIC, "kwargs": {"dtypes": ["float32"]}},
        {"via": "core", "model": PUBLIC, "kwargs": {"dtypes": ["float32"]}},
    ]
    return drive(hub_server, cases, tmp_path_factory.mktemp("core"))


@pytest.fixture(scope="module")
def page(hub_server: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    cases = [*visitors("app", GATED, dtypes=["float32"]), *visitors("app", PRIVATE, dtypes=["float32"])]
    return drive(hub_server, cases, tmp_path_factory.mktemp("page"))


def test_a_gated_answer_is_served_only_to_approved_callers(core: dict[str, Any]) -> None:
    approved, anonymous, unapproved, again = core["results"][:4]
    assert approved["ok"]["rows"][0]["total_bytes"] > 0
    assert anonymous.get("error") == "GatedModelError" and anonymous["exit"] == 2, anonymous
    assert "is gated: accept its conditions" in anonymous["message"]
    assert unapproved.get("error") == "GatedModelError" and unapproved["exit"] == 2, unapproved
    assert "not on its access list" in unapproved["message"]
    assert again["ok"] == approved["ok"]
    # the repeat came from the cache, after one access check: no file was read again
    assert again["calls"] == {"model_info": 1, "check_access": 1}


def test_a_request_not_cached_is_refused_too(core: dict[str, Any]) -> None:
    unapproved, anonymous = core["results"][4:6]
    assert unapproved.get("error") == "GatedModelError" and unapproved["exit"] == 2, unapproved
    assert anonymous.get("error") == "GatedModelError" and anonymous["exit"] == 2, anonymous


def test_a_private_answer_is_served_only_to_callers_who_can_see_the_repo(core: dict[str, Any]) -> None:
    approved, anonymous, unapproved, again = core["results"][6:10]
    assert approved["ok"]["rows"][0]["total_bytes"] > 0
    for refused in (anonymous, unapproved):
        assert refused.get("error") == "ModelNotFoundError" and refused["exit"] == 2, refused
    assert again["ok"] == approved["ok"]
    assert again["calls"] == {"model_info": 1}  # model_info of a private repo is itself the access check


def test_public_repos_keep_their_one_request_repeat(core: dict[str, Any]) -> None:
    first, again = core["results"][10:12]
    assert first["ok"] == again["ok"] and "check_access" not in first["calls"]
    assert again["calls"] == {"model_info": 1}


def test_the_page_shows_the_refusal_to_visitors_without_access(page: dict[str, Any]) -> None:
    approved, anonymous, unapproved, again = page["results"][:4]
    assert approved["ok"]["rows"][0]["total_bytes"] > 0 and GATED in approved["summary"]
    assert anonymous == {**anonymous, "error": "page", "exit": None}
    assert "is gated: accept its conditions" in anonymous["message"] and "“Hub token”" in anonymous["message"]
    assert unapproved["error"] == "page" and "not on its access list" in unapproved["message"]
    assert again["ok"] == approved["ok"] and again["files"] == approved["files"]
    p_approved, p_anonymous, p_unapproved, p_again = page["results"][4:8]
    assert p_approved["ok"]["rows"][0]["total_bytes"] > 0 and p_again["ok"] == p_approved["ok"]
    for refused in (p_anonymous, p_unapproved):
        assert refused["error"] == "page" and "No model 'estimator-test/private-model'" in refused["message"], refused


def test_tokens_reach_no_log_cache_key_file_or_message(core: dict[str, Any], page: dict[str, Any]) -> None:
    for run in (core, page):
        assert run["leaks"] == [] and run["log_lines"] > 0
        for outcome in run["results"]:
            assert USER not in json.dumps(outcome) and UNAPPROVED not in json.dumps(outcome)
