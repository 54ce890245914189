"""From a :class:`~estimator.reference.ModelRef` to what the builders need: config, library, source.

Local folders are read from disk; Hub repos through :mod:`estimator.hub` (model info, then the
config at the resolved commit, so a cache key can use the commit sha).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from estimator import hub
from estimator.errors import MalformedConfigError, NoConfigError, UnsupportedError
from estimator.options import Library
from estimator.reference import ModelRef


@dataclass(frozen=True)
class Resolved:
    """A model reference resolved to its config and metadata."""

    ref: ModelRef
    source: str  # "hub" | "local"
    library: Library
    config: dict[str, Any]
    revision: str | None = None  # the commit sha for Hub repos
    files: tuple[str, ...] = ()
    gated: bool = False
    extra: dict[str, Any] = field(default_factory=dict)  # other configs (model_index.json, modules.json)

    @property
    def name(self) -> str:
        return self.ref.display


def detect_library(config: dict[str, Any] | None, files: tuple[str, ...], hub_library: str | None = None, tags: tuple[str, ...] = ()) -> Library:
    """Which library builds this model: the Hub's ``library_name`` first, then the files' shape."""
    if hub_library:
        for library in Library:
            if library is not Library.AUTO and hub_library.lower() == library.value:
                return library
    if "model_index.json" in files:
        return Library.DIFFUSERS
    if "modules.json" in files or "sentence-transformers" in tags:
        return Library.SENTENCE_TRANSFORMERS
    if config is not None and "architecture" in config and ("pretrained_cfg" in config or "num_classes" in config):
        return Library.TIMM
    if "timm" in tags:
        return Library.TIMM
    return Library.TRANSFORMERS


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise MalformedConfigError(f"{path} is not valid JSON ({exc}).") from None
    if not isinstance(data, dict):
        raise MalformedConfigError(f"{path} is not a JSON object.")
    return data


def resolve_local(ref: ModelRef, library: Library) -> Resolved:
    assert ref.path is not None
    files = tuple(sorted(str(p.relative_to(ref.path)) for p in ref.path.iterdir() if p.is_file()))
    config_path = ref.path / "config.json"
    config = _read_json(config_path) if config_path.is_file() else None
    if library is Library.AUTO:
        library = detect_library(config, files)
    if config is None:
        if library in (Library.DIFFUSERS, Library.SENTENCE_TRANSFORMERS):
            raise UnsupportedError(f"{library.value} models are not estimated yet; only transformers and timm models are.")
        raise NoConfigError(f"{ref.path} has no config.json.")
    return Resolved(ref=ref, source="local", library=library, config=config, files=files)


def resolve_hub(ref: ModelRef, library: Library, *, token: str | None, timeout: float, info: Any = None) -> Resolved:
    """Resolve a Hub repo; ``info`` is its ``model_info`` when the caller already fetched it."""
    assert ref.repo_id is not None
    if info is None:
        info = hub.model_info(ref.repo_id, revision=ref.revision, token=token, timeout=timeout)
    files = tuple(s.rfilename for s in (info.siblings or []))
    tags = tuple(info.tags or ())
    hub_library = info.library_name
    if library is Library.AUTO:
        library = detect_library(None, files, hub_library, tags)
    if library in (Library.DIFFUSERS, Library.SENTENCE_TRANSFORMERS):
        raise UnsupportedError(f"{library.value} models are not estimated yet; only transformers and timm models are.")
    revision = info.sha or ref.revision
    if files and "config.json" not in files:
        raise NoConfigError(f"{ref.repo_id} has no config.json, so there is nothing to build the model from.", model_id=ref.repo_id)
    config = hub.download_json(ref.repo_id, "config.json", revision=revision, token=token, timeout=timeout)
    if library is Library.TRANSFORMERS and "architecture" in config and "pretrained_cfg" in config:
        library = Library.TIMM
    return Resolved(
        ref=ModelRef(repo_id=info.id or ref.repo_id, revision=ref.revision),
        source="hub",
        library=library,
        config=config,
        revision=revision,
        files=files,
        gated=bool(info.gated),
    )


def resolve(ref: ModelRef, library: Library, *, token: str | None = None, timeout: float = hub.DEFAULT_TIMEOUT_S) -> Resolved:
    if ref.path is not None:
        return resolve_local(ref, library)
    return resolve_hub(ref, library, token=token, timeout=timeout)
