"""From a :class:`~estimator.source.reference.ModelRef` to what the builders need: config, library, source.

Local folders are read from disk; Hub repos through :mod:`estimator.source.hub` (model info, then the
config at the resolved commit, so a cache key can use the commit sha).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from estimator.errors import MalformedConfigError, NoConfigError
from estimator.options import Library
from estimator.result import Source
from estimator.source import hub
from estimator.source.configs import read_diffusers, read_sentence_transformers
from estimator.source.reference import ModelRef


@dataclass(frozen=True)
class Resolved:
    """A model reference resolved to its config and metadata."""

    ref: ModelRef
    source: Source
    library: Library
    config: dict[str, Any]
    revision: str | None = None  # the commit sha for Hub repos
    files: tuple[str, ...] = ()
    gated: bool = False
    extra: dict[str, Any] = field(default_factory=dict)  # other configs: "components" (diffusers), "modules" (sentence-transformers)

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
    if config is not None and "_class_name" in config and "_diffusers_version" in config:
        return Library.DIFFUSERS
    if config is not None and "architecture" in config and ("pretrained_cfg" in config or "num_classes" in config):
        return Library.TIMM
    if "timm" in tags:
        return Library.TIMM
    return Library.TRANSFORMERS


def _read_any_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise MalformedConfigError(f"{path} is not valid JSON ({exc}).") from None


JsonReader = Callable[[str], Any]  # a repo path -> its parsed JSON, or None when the file is absent


def resolve_files(
    ref: ModelRef, *, source: Source, library: Library, files: tuple[str, ...], read: JsonReader,
    revision: str | None = None, gated: bool = False,
) -> Resolved:
    """Resolve from a reader of the repo's JSON files (local folder, Hub or the bundled catalog).

    diffusers: ``model_index.json`` and each component's config (``extra["components"]``);
    sentence-transformers: ``modules.json`` and each module's config (``extra["modules"]``);
    otherwise ``config.json``.
    """
    extra: dict[str, Any] = {}
    if library is Library.DIFFUSERS:
        config, extra = read_diffusers(read, model=ref.display)
    elif library is Library.SENTENCE_TRANSFORMERS:
        config, extra = read_sentence_transformers(read, model=ref.display)
    else:
        config = read("config.json")
        if not isinstance(config, dict):
            raise NoConfigError(f"{ref.display} has no config.json.", model_id=ref.repo_id)
        if library is Library.AUTO:
            library = detect_library(config, files)
    return Resolved(ref=ref, source=source, library=library, config=config, revision=revision, files=files, gated=gated, extra=extra)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
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
    if library in (Library.DIFFUSERS, Library.SENTENCE_TRANSFORMERS):
        root = ref.path

        def read(filename: str) -> Any | None:
            path = root / filename
            return _read_any_json(path) if path.is_file() else None

        return resolve_files(ref, source="local", library=library, files=files, read=read)
    if config is None:
        raise NoConfigError(f"{ref.path} has no config.json.")
    root_path = ref.path
    extra = processor_configs(config, files, lambda name: _read_any_json(root_path / name))
    return Resolved(ref=ref, source="local", library=library, config=config, files=files, extra=extra)


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
    revision = info.sha or ref.revision
    if library in (Library.DIFFUSERS, Library.SENTENCE_TRANSFORMERS):
        repo_id = info.id or ref.repo_id

        def read(filename: str) -> Any | None:
            if files and filename not in files:
                return None
            return hub.download_any_json(repo_id, filename, revision=revision, token=token, timeout=timeout)

        return resolve_files(ModelRef(repo_id=repo_id, revision=ref.revision), source="hub", library=library, files=files,
                             read=read, revision=revision, gated=bool(info.gated))
    if files and "config.json" not in files:
        raise NoConfigError(f"{ref.repo_id} has no config.json, so there is nothing to build the model from.", model_id=ref.repo_id)
    config = hub.download_json(ref.repo_id, "config.json", revision=revision, token=token, timeout=timeout)
    if library is Library.TRANSFORMERS and "architecture" in config and "pretrained_cfg" in config:
        library = Library.TIMM
    repo_id = info.id or ref.repo_id
    extra = processor_configs(config, files, lambda name: hub.download_any_json(repo_id, name, revision=revision, token=token,
                                                                                 timeout=timeout))
    return Resolved(
        ref=ModelRef(repo_id=info.id or ref.repo_id, revision=ref.revision),
        source="hub",
        library=library,
        config=config,
        revision=revision,
        files=files,
        gated=bool(info.gated),
        extra=extra,
    )


PROCESSOR_FILES = ("preprocessor_config.json", "processor_config.json", "video_preprocessor_config.json")


def processor_configs(config: dict[str, Any], files: tuple[str, ...], read: JsonReader) -> dict[str, Any]:
    """A vision-language or speech model's processor settings, ``extra["preprocessor_config"]``,
    ``extra["processor_config"]`` and ``extra["video_preprocessor_config"]`` (image size, patching, tiling, tokens
    per image; a video processor's pixel range and frames; sampling rate, mel
    bins): the JSON files only, never the repo's code. Other models: nothing is read."""
    if not any(key in config for key in ("vision_config", "audio_config", "num_mel_bins")):
        return {}
    found: dict[str, Any] = {}
    for name in PROCESSOR_FILES:
        if name in files:
            data = read(name)
            if isinstance(data, dict):
                found[name.removesuffix(".json")] = data
    return found


def resolve(ref: ModelRef, library: Library, *, token: str | None = None, timeout: float = hub.DEFAULT_TIMEOUT_S) -> Resolved:
    if ref.path is not None:
        return resolve_local(ref, library)
    return resolve_hub(ref, library, token=token, timeout=timeout)
