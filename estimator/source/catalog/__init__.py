"""The bundled catalog: configs of popular models, for answers when the Hub cannot be reached.

``data/index.json`` lists every entry: the Hub ``revision`` its files were taken at (``null``
where it is not known), the ``library``, the ``files`` bundled (configs only, never weights), and
whether the entry is ``reconstructed`` from published hyper-parameters rather than copied from the
Hub. ``data/<org>__<name>/`` holds the files with their repo paths. ``tools/refresh_catalog.py``
rewrites the snapshot from the Hub when a network is available.

An answer from the catalog has ``source: "catalog"`` and says so on every row (:func:`catalog_note`);
it is never cached as if it came from the Hub.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import TYPE_CHECKING, Any

from estimator.errors import MalformedConfigError
from estimator.options import Library

if TYPE_CHECKING:
    from estimator.source.resolve import Resolved

INDEX = "index.json"


@dataclass(frozen=True)
class CatalogEntry:
    """One bundled model."""

    repo_id: str
    revision: str | None
    library: Library
    reconstructed: bool
    files: tuple[str, ...]
    source: str
    snapshot: str  # the date the entry was taken (the entry's own "snapshot", else the index's)

    @property
    def folder(self) -> str:
        return self.repo_id.replace("/", "__")


def _data() -> Any:
    return resources.files(__name__).joinpath("data")


@lru_cache(maxsize=1)
def catalog_index() -> dict[str, Any]:
    """The parsed ``data/index.json``."""
    index = json.loads(_data().joinpath(INDEX).read_text(encoding="utf-8"))
    if not isinstance(index, dict) or not isinstance(index.get("models"), dict):
        raise MalformedConfigError("The bundled catalog's index.json is damaged; reinstall the package.")
    return index


def catalog_ids() -> tuple[str, ...]:
    """Every repo id the catalog answers for (aliases not included)."""
    return tuple(catalog_index()["models"])


def catalog_entry(repo_id: str) -> CatalogEntry | None:
    """The entry for ``repo_id`` (or a legacy alias of it, e.g. ``gpt2``), or None."""
    index = catalog_index()
    models = index["models"]
    canonical = index.get("aliases", {}).get(repo_id, repo_id)
    if canonical not in models:
        lowered = {name.lower(): name for name in models}
        canonical = lowered.get(canonical.lower(), canonical)
    data = models.get(canonical)
    if data is None:
        return None
    return CatalogEntry(
        repo_id=canonical,
        revision=data.get("revision"),
        library=Library.parse(data.get("library", "transformers"), option="library"),
        reconstructed=bool(data.get("reconstructed")),
        files=tuple(data.get("files") or ()),
        source=str(data.get("source") or ""),
        snapshot=str(data.get("snapshot") or index.get("snapshot") or "unknown"),
    )


def read_catalog_json(entry: CatalogEntry, filename: str) -> Any | None:
    """A bundled file of ``entry`` parsed as JSON, or None when the catalog does not hold it."""
    if filename not in entry.files:
        return None
    return json.loads(_data().joinpath(entry.folder, *filename.split("/")).read_text(encoding="utf-8"))


def catalog_note(entry: CatalogEntry) -> str:
    """The line every row of a catalog answer carries."""
    revision = f"revision {entry.revision[:12]}" if entry.revision else "Hub revision unknown"
    kind = "a config RECONSTRUCTED from published hyper-parameters, not the Hub's file" if entry.reconstructed else "the Hub's config file"
    return (
        f"answered from the bundled catalog snapshot ({entry.snapshot}, {revision}; {kind}) "
        f"because the Hub could not be reached"
    )


def catalog_lookup(repo_id: str, library: Library = Library.AUTO) -> Resolved | None:
    """``repo_id`` resolved from the bundled catalog (``source="catalog"``), or None if it is not there."""
    from estimator.source.reference import ModelRef
    from estimator.source.resolve import resolve_files

    entry = catalog_entry(repo_id)
    if entry is None:
        return None
    chosen = entry.library if library is Library.AUTO else library
    return resolve_files(
        ModelRef(repo_id=entry.repo_id, revision=entry.revision),
        source="catalog",
        library=chosen,
        files=entry.files,
        read=lambda filename: read_catalog_json(entry, filename),
        revision=entry.revision,
    )


__all__ = ["CatalogEntry", "catalog_entry", "catalog_ids", "catalog_index", "catalog_lookup", "catalog_note", "read_catalog_json"]
