"""All Hub access, through ``huggingface_hub`` only, with a timeout on every call.

Each function here translates the client's exceptions into :mod:`estimator.errors` (one place,
:func:`hub_errors`), so callers see "gated: pass a token" rather than an HTTP traceback. Tokens are
passed through to the client and never appear in a message, a log line or a cache key.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from estimator.errors import (
    GatedModelError,
    HubError,
    HubRateLimitedError,
    HubTimeoutError,
    MalformedConfigError,
    ModelNotFoundError,
    NoConfigError,
    RevisionNotFoundError,
)

if TYPE_CHECKING:
    from huggingface_hub import ModelInfo
    from huggingface_hub.utils import SafetensorsRepoMetadata

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 10.0
_configured_timeout: float | None = None


def _configure_session(timeout: float) -> None:
    """Give huggingface_hub's shared HTTP client a timeout (its default client has none)."""
    global _configured_timeout
    if _configured_timeout == timeout:
        return
    import httpx2  # huggingface_hub's own HTTP library
    from huggingface_hub.utils import _http

    def factory() -> Any:
        return httpx2.Client(
            event_hooks={"request": [_http.hf_request_event_hook]},
            follow_redirects=True,
            timeout=httpx2.Timeout(timeout),
        )

    _http.set_client_factory(factory)
    _configured_timeout = timeout


def endpoint() -> str:
    """The Hub endpoint huggingface_hub talks to (``HF_ENDPOINT``, read by the client at import)."""
    from huggingface_hub import constants

    return constants.ENDPOINT


@contextlib.contextmanager
def hub_errors(repo_id: str, revision: str | None, *, token_given: bool, what: str = "the model") -> Iterator[None]:
    """Translate huggingface_hub and network exceptions raised inside into estimator errors."""
    from huggingface_hub import errors as hf

    rev = f" at revision {revision!r}" if revision else ""
    try:
        yield
    except hf.GatedRepoError as exc:
        status = exc.response.status_code if exc.response is not None else None
        if token_given and status == 403:
            raise GatedModelError(
                f"{repo_id} is gated and the token's account is not on its access list: request access at "
                f"{endpoint()}/{repo_id}, then try again.",
                model_id=repo_id, revision=revision,
            ) from None
        raise GatedModelError(
            f"{repo_id} is gated: accept its conditions at {endpoint()}/{repo_id} and pass a token "
            f"(--token, the HF_TOKEN variable, or `hf auth login`).",
            model_id=repo_id, revision=revision,
        ) from None
    except hf.RevisionNotFoundError:
        raise RevisionNotFoundError(f"{repo_id} has no revision {revision!r}; check the branch, tag or commit.", model_id=repo_id, revision=revision) from None
    except hf.RemoteEntryNotFoundError:
        raise NoConfigError(f"{repo_id}{rev} has no {what}; is it a model repo with a config.json?", model_id=repo_id, revision=revision) from None
    except hf.RepositoryNotFoundError:
        hint = "" if token_given else " If it is private, pass a token that can read it (--token or HF_TOKEN)."
        raise ModelNotFoundError(f"No model {repo_id!r} on the Hub; check the spelling.{hint}", model_id=repo_id, revision=revision) from None
    except hf.OfflineModeIsEnabled:
        raise HubError(f"Offline mode (HF_HUB_OFFLINE) is on, so {repo_id} cannot be fetched from the Hub.", model_id=repo_id) from None
    except hf.HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else None
        if status == 429:
            raise HubRateLimitedError(f"The Hub is rate-limiting requests (HTTP 429) for {repo_id}; wait a minute and try again.", model_id=repo_id) from None
        if status in (401, 403) and token_given:
            raise ModelNotFoundError(f"The Hub refused the token for {repo_id} (HTTP {status}); check that it is valid and can read this repo.", model_id=repo_id) from None
        raise HubError(f"The Hub failed while fetching {what} of {repo_id} (HTTP {status}); try again later.", model_id=repo_id) from None
    except Exception as exc:  # network-level failures come from httpx2, whose classes we match by name
        names = {cls.__name__ for cls in type(exc).__mro__}
        if names & {"TimeoutException", "ReadTimeout", "ConnectTimeout", "TimeoutError"}:
            raise HubTimeoutError(f"The Hub did not answer in time for {repo_id}; try again, or later if it persists.", model_id=repo_id) from None
        if names & {"ConnectError", "NetworkError", "TransportError", "LocalEntryNotFoundError", "ConnectionError"}:
            raise HubError(f"Could not reach the Hub at {endpoint()} for {repo_id}; check the network.", model_id=repo_id) from None
        raise


def model_info(repo_id: str, *, revision: str | None, token: str | None, timeout: float = DEFAULT_TIMEOUT_S) -> ModelInfo:
    """``huggingface_hub.model_info`` with siblings, translated errors and a timeout."""
    from huggingface_hub import HfApi

    _configure_session(timeout)
    with hub_errors(repo_id, revision, token_given=token is not None, what="model info"):
        return HfApi().model_info(repo_id, revision=revision, token=token, timeout=timeout)


def download_json(repo_id: str, filename: str, *, revision: str | None, token: str | None, timeout: float = DEFAULT_TIMEOUT_S) -> dict[str, Any]:
    """Download ``filename`` (a small JSON file) through the Hub cache and parse it."""
    from huggingface_hub import hf_hub_download

    _configure_session(timeout)
    with hub_errors(repo_id, revision, token_given=token is not None, what=filename):
        path = hf_hub_download(repo_id, filename, revision=revision, token=token, etag_timeout=timeout)
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise MalformedConfigError(f"{filename} of {repo_id} is not valid JSON ({exc}).", model_id=repo_id, revision=revision) from None
    if not isinstance(data, dict):
        raise MalformedConfigError(f"{filename} of {repo_id} is not a JSON object.", model_id=repo_id, revision=revision)
    return data


def safetensors_metadata(repo_id: str, *, revision: str | None, token: str | None, timeout: float = DEFAULT_TIMEOUT_S) -> SafetensorsRepoMetadata | None:
    """Per-tensor shapes and dtypes from the repo's safetensors headers (HTTP Range reads), or None."""
    from huggingface_hub import get_safetensors_metadata
    from huggingface_hub.errors import NotASafetensorsRepoError, SafetensorsParsingError

    _configure_session(timeout)
    try:
        with hub_errors(repo_id, revision, token_given=token is not None, what="safetensors weights"):
            return get_safetensors_metadata(repo_id, revision=revision, token=token, timeout=timeout)
    except (NotASafetensorsRepoError, SafetensorsParsingError, NoConfigError) as exc:
        logger.info("no usable safetensors headers for %s: %s", repo_id, type(exc).__name__)
        return None


def file_sizes(repo_id: str, paths: list[str], *, revision: str | None, token: str | None, timeout: float = DEFAULT_TIMEOUT_S) -> dict[str, int]:
    """The size the Hub declares for each of ``paths`` (LFS size where the file is in LFS)."""
    from huggingface_hub import HfApi

    _configure_session(timeout)
    with hub_errors(repo_id, revision, token_given=token is not None, what="file sizes"):
        wanted = set(paths)
        infos = [item for item in HfApi().list_repo_tree(repo_id, revision=revision, token=token, recursive=True) if item.path in wanted]
    sizes = {}
    for item in infos:
        size = getattr(item, "size", None)
        lfs = getattr(item, "lfs", None)
        if lfs is not None and getattr(lfs, "size", None):
            size = lfs.size
        if size is not None:
            sizes[item.path] = int(size)
    missing = [p for p in paths if p not in sizes]
    if missing:
        raise HubError(f"The Hub did not give the size of {', '.join(missing)} in {repo_id}.", model_id=repo_id)
    return sizes
