"""Where a sweep's references come from: a file (one per line) or the Hub's model list."""

from __future__ import annotations

from pathlib import Path


class ReferencesError(ValueError):
    """The list of models could not be read (exit status 2)."""


def from_file(path: Path) -> list[str]:
    """Every non-empty line of ``path`` that is not a ``#`` comment, stripped."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ReferencesError(f"--models: no file {str(path)!r}; give a text file with one model reference per line.") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ReferencesError(f"--models: cannot read {str(path)!r} ({type(exc).__name__}); give a UTF-8 text file.") from None
    refs = [line.split(" #", 1)[0].strip() for line in text.splitlines()]
    refs = [r for r in refs if r and not r.startswith("#")]
    if not refs:
        raise ReferencesError(f"--models: {str(path)!r} lists no model; write one Hub id, Hub URL or folder per line.")
    return refs


def from_search(search: str | None, *, pipeline_tag: str | None, library: str | None, sort: str, limit: int) -> list[str]:
    """Repo ids from ``HfApi.list_models`` (the Hub's own search), in the Hub's order."""
    from huggingface_hub import HfApi

    if limit < 1:
        raise ReferencesError("--limit must be at least 1.")
    from huggingface_hub.errors import HfHubHTTPError

    try:
        models = HfApi().list_models(search=search or None, pipeline_tag=pipeline_tag, filter=library or None, sort=sort,  # type: ignore[arg-type]
                                     limit=limit)
        refs = [m.id for m in models]
    except HfHubHTTPError as exc:
        status = getattr(exc.response, "status_code", None)
        if status is not None and status < 500 and status != 429:
            raise ReferencesError(f"--search: the Hub refused the query (HTTP {status}); check --sort, --pipeline-tag and --search-library.") from None
        raise ConnectionError(f"the Hub's model list failed (HTTP {status}); try again later.") from None
    except OSError as exc:  # httpx's transport errors are not OSErrors; connection refusals are
        raise ConnectionError(f"the Hub's model list could not be fetched ({type(exc).__name__}).") from None
    if not refs:
        raise ReferencesError("--search found no model on the Hub; widen the query (--pipeline-tag, --search-library, TEXT).")
    return refs
