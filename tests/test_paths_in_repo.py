"""No file of the project reads, writes or names a path outside the repository.

A newcomer's clone has only the repository: a test, tool or bench pointing at the workplace's
shared folder or someone's home directory fails (or silently skips) there. Every file under
``tests/``, ``testkit/``, ``tools/``, ``bench/``, ``scripts/``, ``estimator/``, ``estimator_app/``
and ``app.py`` is read; a path outside the repo (the workplace root, the sibling ``shared`` folder,
a home directory under ``/home``, ``/root`` or ``/Users``) fails the test, with two explicit exceptions:

- a comment or a docstring line that cites where something was copied from: the line itself
  says so (``copy of``, ``copies of``, ``copied from``, ``provenance``, ``seed``), e.g.
  ``# A copy of the public config.json of ... (from <shared>/hub-fixtures)``. Code and any other
  string literal never may;
- in JSON fixtures (published configs, stored byte-exact), the publisher's own ``_name_or_path``
  (a path on the publisher's machine that transformers records and nothing here reads).
Text files (Markdown, shell, TOML) follow the comment rule line by line. A bare ``~/...`` is not
flagged: the tests hand it to the app and the CLI as a reference to refuse.
"""

from __future__ import annotations

import io
import json
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCANNED = ["tests", "testkit", "tools", "bench", "scripts", "estimator", "estimator_app", "app.py"]
SKIP_DIRS = {"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".hypothesis"}

# Spelled in pieces so that this file does not match itself.
OUTSIDE = re.compile(
    "|".join(
        [
            re.escape("/" + "work" + "/"),
            re.escape(".." + "/shared"),
            re.escape("/" + "home" + "/"),
            re.escape("/" + "root" + "/"),
            re.escape("/" + "Users" + "/"),
        ]
    )
)
CITATION = re.compile(r"\bcop(?:y|ies|ied)\b|\bprovenance\b|\bseeds?\b", re.IGNORECASE)
PUBLISHER_KEYS = {"_name_or_path"}


def _files() -> Iterator[Path]:
    for name in SCANNED:
        path = ROOT / name
        if path.is_file():
            yield path
            continue
        for file in sorted(path.rglob("*")):
            if file.is_file() and not SKIP_DIRS.intersection(file.relative_to(ROOT).parts):
                yield file


def _cited(text: str) -> bool:
    return all(CITATION.search(line) for line in text.splitlines() if OUTSIDE.search(line))


def python_findings(source: str) -> list[str]:
    """Code and string literals naming an outside path; comments and docstrings only where cited."""
    findings = []
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    previous = tokenize.NEWLINE
    for tok in tokens:
        if OUTSIDE.search(tok.string):
            statement_string = tok.type == tokenize.STRING and previous in (
                tokenize.NEWLINE, tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING,
            )
            comment_like = tok.type == tokenize.COMMENT or statement_string
            if not (comment_like and _cited(tok.string)):
                findings.append(f"line {tok.start[0]}: {tok.string.strip()[:120]}")
        if tok.type not in (tokenize.COMMENT, tokenize.NL):
            previous = tok.type
    return findings


def json_findings(data: object, where: str = "") -> list[str]:
    if isinstance(data, dict):
        return [
            f for k, v in data.items() if k not in PUBLISHER_KEYS
            for f in json_findings(k, where) + json_findings(v, f"{where}.{k}")
        ]
    if isinstance(data, list):
        return [f for i, v in enumerate(data) for f in json_findings(v, f"{where}[{i}]")]
    if isinstance(data, str) and OUTSIDE.search(data):
        return [f"{where or 'key'}: {data[:120]}"]
    return []


def text_findings(text: str) -> list[str]:
    return [
        f"line {n}: {line.strip()[:120]}"
        for n, line in enumerate(text.splitlines(), 1)
        if OUTSIDE.search(line) and not CITATION.search(line)
    ]


def findings(path: Path) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return []  # binary fixture (safetensors, GGUF bytes): no paths to read
    if not OUTSIDE.search(text):
        return []
    if path.suffix == ".py":
        return python_findings(text)
    if path.suffix == ".json":
        try:
            return json_findings(json.loads(text))
        except ValueError:
            pass
    return text_findings(text)


def test_no_file_names_a_path_outside_the_repository() -> None:
    bad = {str(p.relative_to(ROOT)): f for p in _files() if (f := findings(p))}
    assert not bad, "paths outside the repository (copy the file into the repo instead):\n" + "\n".join(
        f"{name}: {line}" for name, lines in bad.items() for line in lines
    )


@pytest.mark.parametrize(
    ("source", "flagged"),
    [
        ('GPT2 = Path("' + "/wo" + 'rk/shared/hub-fixtures/models/gpt2")\n', True),
        ('x = 1  # read ' + ".." + '/shared/hub-fixtures\n', True),
        ('x = 1  # a copy of ' + ".." + '/shared/hub-fixtures/models/gpt2\n', False),
        ('"""Copied from ' + "/ho" + 'me/me/fixtures."""\n', False),
        ('def f():\n    """Reads ' + "/ho" + 'me/me/fixtures."""\n', True),
        ('open("' + "/ro" + 'ot/notes.txt")\n', True),
        ('print("copy of ' + "/wo" + 'rk/x")\n', True),  # a cited path in code still counts
        ('p = tmp_path / "home"\n', False),
    ],
)
def test_the_rule_itself(source: str, flagged: bool) -> None:
    assert bool(python_findings(source)) is flagged


def test_json_fixtures_keep_only_the_publishers_own_path() -> None:
    assert not json_findings({"_name_or_path": "/" + "home/someone/llama-7b/", "n": 1})
    assert json_findings({"tokenizer_file": "/" + "home/someone/tok.json"})
