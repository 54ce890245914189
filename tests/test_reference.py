from __future__ import annotations

from pathlib import Path

import pytest

from estimator.errors import BadReferenceError, NoConfigError
from estimator.source.reference import parse_reference


@pytest.mark.parametrize(
    ("text", "repo_id", "revision"),
    [
        ("gpt2", "gpt2", None),
        ("meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.1-8B", None),
        ("https://huggingface.co/meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.1-8B", None),
        ("https://huggingface.co/meta-llama/Llama-3.1-8B/", "meta-llama/Llama-3.1-8B", None),
        ("https://huggingface.co/meta-llama/Llama-3.1-8B/tree/v1.0", "meta-llama/Llama-3.1-8B", "v1.0"),
        ("huggingface.co/gpt2/tree/main", "gpt2", "main"),
        ("https://hf.co/google-bert/bert-base-cased/blob/abc123/config.json", "google-bert/bert-base-cased", "abc123"),
    ],
)
def test_hub_references(text: str, repo_id: str, revision: str | None) -> None:
    ref = parse_reference(text)
    assert (ref.repo_id, ref.revision, ref.path) == (repo_id, revision, None)


def test_explicit_revision_wins_over_the_url() -> None:
    assert parse_reference("https://huggingface.co/gpt2/tree/main", revision="abc").revision == "abc"


def test_endpoint_host_is_a_hub_host() -> None:
    assert parse_reference("http://127.0.0.1:8123/org/name", endpoint="http://127.0.0.1:8123").repo_id == "org/name"


@pytest.mark.parametrize("text", ["", "   ", "a/b/c", "bad name", "org--x/y", "https://example.com/org/name", "https://huggingface.co/datasets/org/name"])
def test_bad_references(text: str) -> None:
    with pytest.raises(BadReferenceError):
        parse_reference(text)


def test_local_folder(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    assert parse_reference(str(tmp_path)).path == tmp_path.resolve()
    assert parse_reference(str(tmp_path / "config.json")).path == tmp_path.resolve()
    (tmp_path / "empty").mkdir()
    with pytest.raises(NoConfigError):
        parse_reference(str(tmp_path / "empty"))
