"""The hosted page reads models from the Hub only (issue 18, defect 2).

A path typed in the form or given in a share link (``model=../../...``) gets one refusal that says
nothing about the server's disk (the same for a folder that exists, one that does not, and one that
holds a config.json), and the disk is not looked at. Local folders stay a CLI and Python feature.
Through the page's handlers and share-link parsing; no Hub is needed (nothing reaches it).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

import estimator_app.handlers as app
from estimator.errors import BadReferenceError
from estimator.source import reference
from estimator.source.reference import HUB_ONLY, ModelRef, parse_hub_reference, parse_reference
from estimator_app import answers, form
from tests.app_outputs import DEFAULTS, FakeRequest, no_progress, refusal


@pytest.fixture
def server_folders(tmp_path: Path) -> dict[str, str]:
    """Paths as a visitor would type them: a folder with a config.json, an empty one, none at all."""
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text('{"model_type": "gpt2"}')
    (tmp_path / "empty").mkdir()
    return {
        "with config": str(tmp_path / "model"),
        "its config file": str(tmp_path / "model" / "config.json"),
        "empty": str(tmp_path / "empty"),
        "missing": "/nonexistent/dir",
        "root": "/root",
        "relative": "../../etc",
        "dot": "./model",
        "home": "~",
        "windows": "C:\\Users\\x",
    }


@pytest.fixture
def no_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail if a reference is looked up on the disk (``parse_reference`` does it through ``Path``)."""

    def looked(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the page looked at the disk")

    monkeypatch.setattr(reference, "Path", looked)


def test_a_typed_path_gets_one_refusal_whatever_the_disk_holds(server_folders: dict[str, str], no_disk: None) -> None:
    messages = set()
    for text in server_folders.values():
        title, message = refusal(app.run_form(text, *DEFAULTS, "", None, progress=no_progress))
        messages.add((title, message))
    assert messages == {("Check the form", form.HUB_ONLY)}
    assert "Hub only" in form.HUB_ONLY and "command line" in form.HUB_ONLY


def test_a_path_in_a_share_link_is_ignored_with_one_notice(server_folders: dict[str, str], no_disk: None) -> None:
    notices = set()
    for text in server_folders.values():
        *fields, notice, autorun = app.load_link(FakeRequest({"model": text, "dtypes": "float32"}))
        assert fields[0] == "" and autorun is False and notice.visible is True
        notices.add(notice.value.replace(repr(text[:40]), "PATH"))
    assert notices == {"**Some link parameters were ignored:**\n- Ignored model=PATH: expected a Hub model id or Hub URL; this page does not read folders."}


def test_the_page_never_hands_the_core_the_visitor_s_text(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A repo id that is also a folder where the server runs is a repo id: the core gets a parsed Hub reference."""
    (tmp_path / "org" / "name").mkdir(parents=True)
    (tmp_path / "org" / "name" / "config.json").write_text('{"model_type": "gpt2"}')
    monkeypatch.chdir(tmp_path)
    assert parse_reference("org/name").path is not None  # what the CLI does with it: a local folder
    asked: list[Any] = []

    def fake_estimate(model: Any, **kwargs: Any) -> Any:
        asked.append((model, kwargs["revision"], kwargs["token"]))
        raise BadReferenceError("stop here")

    monkeypatch.setattr(answers, "estimate", fake_estimate)
    for text, revision in (("org/name", "main"), ("https://huggingface.co/org/name/tree/v1", "main"), ("org/name", "v2")):
        title, message = refusal(app.run_form(text, revision, *DEFAULTS[1:], "hf_x", None, progress=no_progress))
        assert re.search("stop here", message), message
    assert asked == [
        (ModelRef(repo_id="org/name"), None, "hf_x"),
        (ModelRef(repo_id="org/name", revision="v1"), None, "hf_x"),
        (ModelRef(repo_id="org/name", revision="v2"), "v2", "hf_x"),
    ]


def test_hub_ids_and_urls_still_fill_the_form_from_a_link() -> None:
    for text in ("openai-community/gpt2", "gpt2", "https://huggingface.co/org/name/tree/v1.0", "hf.co/org/name"):
        *fields, notice, autorun = app.load_link(FakeRequest({"model": text}))
        assert fields[0] == text and autorun is True and notice.visible is False
    *fields, notice, _ = app.load_link(FakeRequest({"model": "not a repo"}))
    assert fields[0] == "" and "expected a Hub model id or Hub URL." in notice.value


def test_a_malformed_hub_id_gets_the_core_s_message_without_folders() -> None:
    title, message = refusal(app.run_form("a/b/c", *DEFAULTS, "", None, progress=no_progress))
    assert "is not a Hub repo id" in message and "folder" not in message


@pytest.mark.parametrize("text", ["/root", "./x", "../../etc/passwd", "~", "~/x", "C:\\x", "a\\b", "org/../x", ".", ".."])
def test_the_core_helper_refuses_paths_without_the_disk(text: str, no_disk: None) -> None:
    with pytest.raises(BadReferenceError) as caught:
        parse_hub_reference(text)
    assert caught.value.message == HUB_ONLY


def test_a_hub_url_names_a_repo_even_where_a_folder_has_its_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "org" / "name").mkdir(parents=True)
    (tmp_path / "org" / "name" / "config.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    assert parse_reference("https://huggingface.co/org/name").repo_id == "org/name"
    assert parse_hub_reference("org/name") == ModelRef(repo_id="org/name")
