"""Turn what a user typed into a :class:`ModelRef`: a Hub repo id, a Hub URL, a local folder, or a local ``.gguf`` file.

:func:`parse_reference` (the CLI and Python) also accepts a local folder, so it looks at the disk;
:func:`parse_hub_reference` (the hosted page) accepts Hub ids and Hub URLs only and never looks at
the disk, so what a visitor types can tell them nothing about the server's files.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlparse

from estimator.errors import BadReferenceError, NoConfigError

# huggingface_hub's own rule (utils/_validators.py), repeated here so a typo is caught before any
# network call: optional namespace, then a name of word characters, '-' and '.', no '--' or '..'.
_REPO_ID = re.compile(r"^(?:[\w\-.]{1,96}/)?[\w\-.]{1,96}$", re.ASCII)  # the Hub's ids: ASCII letters, digits, - _ .
_HUB_HOSTS = {"huggingface.co", "www.huggingface.co", "hf.co"}
CONFIG_FILES = ("config.json", "model_index.json", "modules.json")
# Text that names a place on a disk rather than a repo: absolute, home- or dot-relative, a Windows
# drive or a backslash, or a '.'/'..' segment anywhere (a repo id never has one).
_PATH_LIKE = re.compile(r"^(?:[/~\\]|[A-Za-z]:)|\\|(?:^|/)\.{1,2}(?:/|$)")
HUB_ONLY = "Only Hub models are read here: give a Hub repo id such as 'openai-community/gpt2' or 'org/name', or a Hub URL, not a path."


@dataclass(frozen=True)
class ModelRef:
    """A model reference: exactly one of ``repo_id`` and ``path`` is set."""

    repo_id: str | None = None
    path: Path | None = None
    revision: str | None = None
    given: str | None = field(default=None, compare=False)  # a folder as the user wrote it (shown; path is resolved)

    @property
    def display(self) -> str:
        """The repo id, or the folder as given (``tests/hub_data/...`` prints as typed, so the README's example
        prints the same on every machine), else its absolute path."""
        return self.repo_id if self.repo_id is not None else self.given or str(self.path)


def parse_reference(text: str, *, revision: str | None = None, endpoint: str | None = None) -> ModelRef:
    """Parse ``text`` as a local folder, a local ``.gguf`` file (or a folder of them), a Hub URL or a Hub repo id.

    A URL's ``/tree/REV`` gives the revision unless ``revision`` is given explicitly.
    ``endpoint`` (the ``HF_ENDPOINT`` in force) is accepted as a Hub host too.
    """
    if not isinstance(text, str) or not text.strip():
        raise BadReferenceError("Give a model: a Hub repo id such as 'gpt2' or 'org/name', a Hub URL, or a folder with a config.json.")
    text = text.strip()
    if revision is not None and not str(revision).strip():
        revision = None

    candidate = Path(os.path.expanduser(text))
    try:
        exists = candidate.exists()
    except OSError:  # a name too long for the file system, or a path it may not look at: not a folder here
        exists = False
    if exists:
        if candidate.is_file() and candidate.name in CONFIG_FILES:
            candidate = candidate.parent
        if candidate.is_file() and candidate.name.lower().endswith(".gguf"):  # a GGUF file: the whole model (llama.cpp)
            return ModelRef(path=candidate.resolve(), revision=revision)
        if not candidate.is_dir():
            raise BadReferenceError(f"{text} is a file; give the folder that holds its config.json, or a .gguf file.")
        if not any((candidate / name).is_file() for name in CONFIG_FILES) and not (candidate / "unet").is_dir() and not is_gguf_folder(candidate):
            raise NoConfigError(f"The folder {text} has no config.json (nor model_index.json or modules.json) and no .gguf file; point at "
                                "the folder that holds the model's config, or at a .gguf file.")
        return ModelRef(path=candidate.resolve(), revision=revision, given=text)
    if text.lower().endswith(".gguf") and (is_path_like(text) or text.count("/") != 1):
        raise BadReferenceError(f"No such GGUF file: {text}. Give the path of a .gguf file on this machine, or a Hub repo id.")
    if text.startswith(("/", "./", "../", "~")):
        raise BadReferenceError(f"No such folder: {text}.")

    return _parse_hub(text, revision=revision, endpoint=endpoint, also=", or an existing folder")


def parse_hub_reference(text: str, *, revision: str | None = None, endpoint: str | None = None) -> ModelRef:
    """Parse ``text`` as a Hub repo id or a Hub URL only, without ever looking at the disk.

    A path (``/root``, ``./x``, ``../../etc``, ``~``, ``C:\\``...) is refused with one message,
    :data:`HUB_ONLY`, the same whether or not it exists; a repo-id-shaped text that happens to be a
    folder here is a repo id. Revision and endpoint as for :func:`parse_reference`.
    """
    if not isinstance(text, str) or not text.strip():
        raise BadReferenceError("Give a model: a Hub repo id such as 'gpt2' or 'org/name', or a Hub URL.")
    text = text.strip()
    if revision is not None and not str(revision).strip():
        revision = None
    if is_path_like(text):
        raise BadReferenceError(HUB_ONLY)
    return _parse_hub(text, revision=revision, endpoint=endpoint, also="")


def is_gguf_path(path: Path) -> bool:
    """True for a local ``.gguf`` file, or a folder of them without a config.json (estimated as llama.cpp runs them)."""
    return (path.is_file() and path.name.lower().endswith(".gguf")) or (path.is_dir() and is_gguf_folder(path))


def is_gguf_folder(path: Path) -> bool:
    """A folder holding ``.gguf`` files and none of the config files a model is built from."""
    return not any((path / name).is_file() for name in CONFIG_FILES) and any(p.name.lower().endswith(".gguf") for p in path.iterdir())


def is_path_like(text: str) -> bool:
    """True when ``text`` is written as a path on a disk rather than as a repo id or a URL (no disk access)."""
    text = text.strip()
    if "://" in text:
        return False
    return bool(_PATH_LIKE.search(text)) or text in (".", "..")


def _parse_hub(text: str, *, revision: str | None, endpoint: str | None, also: str) -> ModelRef:
    """A Hub URL or a repo id (never the disk); ``also`` ends the message of a bad id."""
    if "://" in text or text.split("/", 1)[0] in _HUB_HOSTS:
        return _parse_url(text if "://" in text else "https://" + text, revision=revision, endpoint=endpoint)
    repo_id = text.rstrip("/")
    if not _REPO_ID.match(repo_id) or "--" in repo_id or ".." in repo_id:
        raise BadReferenceError(
            f"{text!r} is not a Hub repo id (expected 'name' or 'org/name' with letters, digits, '-', '_' or '.'), a Hub URL{also}."
        )
    return ModelRef(repo_id=repo_id, revision=revision)


def _parse_url(url: str, *, revision: str | None, endpoint: str | None) -> ModelRef:
    parsed = urlparse(url)
    hosts = set(_HUB_HOSTS)
    if endpoint:
        hosts.add(urlparse(endpoint).netloc)
    if parsed.netloc not in hosts:
        raise BadReferenceError(f"{url} is not a Hugging Face Hub URL; give https://huggingface.co/org/name or the repo id.")
    parts = [unquote(p) for p in parsed.path.split("/") if p]
    if parts and parts[0] in ("datasets", "spaces"):
        raise BadReferenceError(f"{url} is a {parts[0][:-1]}, not a model.")
    if parts and parts[0] == "models":
        parts = parts[1:]
    url_revision: str | None = None
    for marker in ("tree", "blob", "resolve"):
        if marker in parts:
            index = parts.index(marker)
            if index + 1 < len(parts):
                url_revision = parts[index + 1]
            parts = parts[:index]
            break
    if not 1 <= len(parts) <= 2:
        raise BadReferenceError(f"{url} does not name a model repo; expected https://huggingface.co/org/name[/tree/revision].")
    # The id inside a URL is a repo id, never a folder, whatever the disk holds.
    return _parse_hub("/".join(parts), revision=revision or url_revision, endpoint=None, also="")
