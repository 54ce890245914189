"""All Hub access, through ``huggingface_hub``'s public API only, with the caller's timeout on each call.

Each function here translates the client's exceptions into :mod:`estimator.errors` (one place,
:func:`hub_errors`), so callers see "gated: pass a token" rather than an HTTP traceback. Tokens are
passed through to the client per call and never appear in a message, a log line or a cache key.

Nothing here changes ``huggingface_hub``'s process-wide state (its shared HTTP client, its
constants): the timeout travels with each call.

- :func:`model_info`: the request ``HfApi.model_info`` makes, through the client's public session with ``timeout=``
  (``HfApi`` itself, with ``timeout=``, behind :func:`file_sizes`, with ``files_metadata=True``).
- A load answer's JSON files and safetensors headers at a commit: one GET each (:func:`download_any_json`,
  :func:`safetensors_header`), the requests ``hf_hub_download`` and ``HfApi.parse_safetensors_file_metadata`` would
  make less the HEAD that files a download in the client's cache.
- ``hf_hub_download``: ``etag_timeout=`` bounds the metadata request that resolves the file; the
  body of the (small JSON) file is read under the client's own ``HF_HUB_DOWNLOAD_TIMEOUT`` (10 s
  unless the environment says otherwise), which ``hf_hub_download`` takes from no argument.
- ``get_safetensors_metadata``: ``timeout=`` bounds each header read; its two existence probes
  and the index download use the client's defaults (``HF_HUB_ETAG_TIMEOUT``,
  ``HF_HUB_DOWNLOAD_TIMEOUT``, 10 s each), which it takes from no argument.
- :func:`read_range`: one HTTP Range request for a file's bytes (a GGUF header), the request
  ``hf_hub_download`` would make, through the client's public session with ``timeout=``.
- ``check_access``: the request ``HfApi.auth_check`` makes (``GET /api/models/{id}/auth-check``),
  which takes no timeout there, through the client's public session with ``timeout=``.
- Discussions: ``HfApi.get_repo_discussions`` and ``create_discussion`` take no timeout, so
  :func:`find_discussion` and :func:`open_discussion` make the same two requests through the
  client's public session (``get_session``, ``build_hf_headers``, ``hf_raise_for_status``), each
  with ``timeout=``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from estimator.errors import (
    BadReferenceError,
    EstimatorError,
    GatedModelError,
    HubError,
    HubRateLimitedError,
    HubTimeoutError,
    MalformedConfigError,
    ModelNotFoundError,
    NoConfigError,
    Option,
    PostingError,
    RevisionNotFoundError,
)

if TYPE_CHECKING:
    from huggingface_hub.utils import SafetensorsRepoMetadata

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 10.0
_COMMIT = re.compile(r"^[0-9a-f]{40}$")  # a commit sha: what the client's cache files answers under
_TIMEOUTS = {"TimeoutException", "ReadTimeout", "ConnectTimeout", "WriteTimeout", "PoolTimeout", "TimeoutError"}
_UNREACHABLE = {"ConnectError", "NetworkError", "TransportError", "LocalEntryNotFoundError", "ConnectionError"}


def endpoint() -> str:
    """The Hub endpoint huggingface_hub talks to (``HF_ENDPOINT``, read by the client at import)."""
    from huggingface_hub import constants

    return constants.ENDPOINT


@contextlib.contextmanager
def hub_errors(
    repo_id: str, revision: str | None, *, token_given: bool, what: str = "the model", posting: str | None = None,
) -> Iterator[None]:
    """Translate huggingface_hub and network exceptions raised inside into estimator errors.

    ``posting`` names what a discussion request does (``"open a discussion on"``): a token the Hub
    refuses there is a :class:`~estimator.errors.PostingError` naming the permission posting needs.
    """
    from huggingface_hub import errors as hf

    rev = f" at revision {revision!r}" if revision else ""
    try:
        yield
    except hf.HFValidationError as exc:  # the client's own check of a repo id or revision
        raise BadReferenceError(f"{repo_id!r}{rev} is not a valid Hub reference: {exc}", model_id=repo_id, revision=revision) from None
    except hf.GatedRepoError as exc:
        status = exc.response.status_code if exc.response is not None else None
        if token_given and status == 403:
            raise GatedModelError(
                f"{repo_id} is gated and the token's account is not on its access list: request access at "
                f"{endpoint()}/{repo_id}, then try again.",
                model_id=repo_id, revision=revision,
            ) from None
        raise GatedModelError(
            [f"{repo_id} is gated: accept its conditions at {endpoint()}/{repo_id} and pass a token (",
             Option("token"), ", the HF_TOKEN variable, or `hf auth login`)."],
            model_id=repo_id, revision=revision,
        ) from None
    except hf.RevisionNotFoundError:
        raise RevisionNotFoundError(f"{repo_id} has no revision {revision!r}; check the branch, tag or commit.", model_id=repo_id, revision=revision) from None
    except hf.RemoteEntryNotFoundError:
        raise NoConfigError(f"{repo_id}{rev} has no {what}; is it a model repo with a config.json?", model_id=repo_id, revision=revision) from None
    except hf.RepositoryNotFoundError:
        hint: list[str | Option] = [] if token_given else [" If it is private, pass a token that can read it (", Option("token"), " or HF_TOKEN)."]
        raise ModelNotFoundError([f"No model {repo_id!r} on the Hub; check the spelling.", *hint], model_id=repo_id, revision=revision) from None
    except hf.OfflineModeIsEnabled:
        raise HubError(f"Offline mode (HF_HUB_OFFLINE) is on, so {repo_id} cannot be fetched from the Hub.", model_id=repo_id) from None
    except hf.HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else None
        if status == 429:
            raise HubRateLimitedError(f"The Hub is rate-limiting requests (HTTP 429) for {repo_id}; wait a minute and try again.", model_id=repo_id) from None
        if posting is not None and status in (401, 403) and token_given:
            raise PostingError(_refused(repo_id, posting, status), model_id=repo_id, status=status) from None
        if status in (401, 403) and token_given:
            raise ModelNotFoundError(f"The Hub refused the token for {repo_id} (HTTP {status}); check that it is valid and can read this repo.", model_id=repo_id) from None
        raise HubError(f"The Hub failed while fetching {what} of {repo_id} (HTTP {status}); try again later.", model_id=repo_id) from None
    except Exception as exc:  # network-level failures come from httpx2, whose classes we match by name
        names = {cls.__name__ for cls in type(exc).__mro__}
        if names & _TIMEOUTS:
            raise HubTimeoutError(f"The Hub did not answer in time for {repo_id}; try again, or later if it persists.", model_id=repo_id) from None
        if names & _UNREACHABLE:
            raise HubError(f"Could not reach the Hub at {endpoint()} for {repo_id}; check the network.", model_id=repo_id) from None
        raise


def _refused(repo_id: str, posting: str, status: int) -> str:
    if status == 401:
        return f"The Hub did not accept the token to {posting} {repo_id}; check that it is valid (HTTP 401)."
    return f"The token may not {posting} {repo_id}: it needs the write-discussions permission (HTTP 403)."


@dataclass(frozen=True)
class RepoFile:
    """A file of the repo, as ``ModelInfo.siblings`` names it."""

    rfilename: str


@dataclass(frozen=True)
class RepoInfo:
    """What an answer reads of a repo's ``GET /api/models/{id}``: the fields of ``huggingface_hub.ModelInfo`` it uses."""

    id: str
    sha: str | None
    siblings: tuple[RepoFile, ...]
    tags: tuple[str, ...]
    library_name: str | None
    gated: str | bool


def model_info(repo_id: str, *, revision: str | None, token: str | None, timeout: float = DEFAULT_TIMEOUT_S) -> RepoInfo:
    """The request ``HfApi.model_info`` makes (``GET /api/models/{id}[/revision/{rev}]``, the client's checks of the id, its
    session, headers and error classes), with translated errors and a timeout; the fields an answer reads.

    Not ``HfApi`` itself: importing ``huggingface_hub.hf_api`` (its Inference Endpoints, Jobs and Spaces clients come
    with it) costs about 0.12 s of CPU per process, a third of a whole load answer (docs/benchmarks.md)."""
    from urllib.parse import quote

    from huggingface_hub import get_session
    from huggingface_hub.utils import build_hf_headers, hf_raise_for_status, validate_repo_id

    with hub_errors(repo_id, revision, token_given=token is not None, what="model info"):
        validate_repo_id(repo_id)
        url = f"{endpoint()}/api/models/{repo_id}" + ("" if revision is None else f"/revision/{quote(revision, safe='')}")
        response = get_session().get(url, headers=build_hf_headers(token=token), timeout=timeout, follow_redirects=True)
        hf_raise_for_status(response)
        data = response.json()
    if not isinstance(data, dict):
        raise HubError(f"The Hub answered the model info of {repo_id} with no object; try again later.", model_id=repo_id)
    siblings = tuple(RepoFile(str(item["rfilename"])) for item in data.get("siblings") or () if isinstance(item, dict) and "rfilename" in item)
    return RepoInfo(id=str(data.get("id") or data.get("modelId") or repo_id), sha=data.get("sha"), siblings=siblings,
                    tags=tuple(data.get("tags") or ()), library_name=data.get("library_name"), gated=data.get("gated") or False)


def check_access(repo_id: str, *, revision: str | None, token: str | None, timeout: float = DEFAULT_TIMEOUT_S) -> None:
    """Return if ``token`` may read the files of ``repo_id`` now; else raise what reading them would.

    ``model_info`` of a gated repo is public, so it proves nothing about access; this does, in one
    small request that reads no file: the one ``HfApi.auth_check`` makes (which takes no timeout),
    through the client's public session with ``timeout``. ``token=None`` sends what the client
    sends implicitly (``HF_TOKEN``, the login cache), unless ``HF_HUB_DISABLE_IMPLICIT_TOKEN`` is
    set, as in the app. A token not on a gated repo's list gives
    :class:`~estimator.errors.GatedModelError`; a repo the token cannot see,
    :class:`~estimator.errors.ModelNotFoundError`; the Hub failing, :class:`~estimator.errors.HubError`.
    """
    from huggingface_hub import get_session
    from huggingface_hub.utils import build_hf_headers, hf_raise_for_status

    with hub_errors(repo_id, revision, token_given=token is not None, what="access"):
        response = get_session().get(f"{endpoint()}/api/models/{repo_id}/auth-check", headers=build_hf_headers(token=token), timeout=timeout)
        hf_raise_for_status(response)


def download_any_json(repo_id: str, filename: str, *, revision: str | None, token: str | None, timeout: float = DEFAULT_TIMEOUT_S) -> Any:
    """A small JSON file of any shape (``modules.json`` is a list), parsed.

    At a commit sha (what a resolved repo passes) it is one GET of its resolve URL through the client's public session,
    with ``timeout`` — not ``hf_hub_download``, whose HEAD before the GET files the file in the client's cache, which an
    answer does not read back (an answer at a commit is cached whole, ``estimator.api``; the Hub requests of an answer:
    docs/benchmarks.md). Offline mode, or a branch name, goes through ``hf_hub_download`` as before.
    """
    from huggingface_hub import constants, get_session
    from huggingface_hub.utils import build_hf_headers, hf_raise_for_status

    text: bytes
    with hub_errors(repo_id, revision, token_given=token is not None, what=filename):
        if constants.HF_HUB_OFFLINE or not revision or not _COMMIT.match(revision):
            from huggingface_hub import hf_hub_download

            text = Path(hf_hub_download(repo_id, filename, revision=revision, token=token, etag_timeout=timeout)).read_bytes()
        else:
            response = get_session().get(resolve_url(repo_id, filename, revision), headers=build_hf_headers(token=token),
                                         timeout=timeout, follow_redirects=True)
            hf_raise_for_status(response)
            text = response.content
    try:
        return json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise MalformedConfigError(f"{filename} of {repo_id} is not valid JSON ({exc}).", model_id=repo_id, revision=revision) from None


def download_json(repo_id: str, filename: str, *, revision: str | None, token: str | None, timeout: float = DEFAULT_TIMEOUT_S) -> dict[str, Any]:
    """Download ``filename`` (a small JSON object, such as config.json) through the Hub cache and parse it."""
    data = download_any_json(repo_id, filename, revision=revision, token=token, timeout=timeout)
    if not isinstance(data, dict):
        raise MalformedConfigError(f"{filename} of {repo_id} is not a JSON object.", model_id=repo_id, revision=revision)
    return data


def safetensors_metadata(
    repo_id: str, *, revision: str | None, token: str | None, timeout: float = DEFAULT_TIMEOUT_S, files: tuple[str, ...] = (),
    folder: str = "",
) -> SafetensorsRepoMetadata | None:
    """Per-tensor shapes and dtypes from the repo's safetensors headers (HTTP Range reads), or None.

    ``files``: the repo's file list from its ``model_info``, when the caller has it. Then the requests are only those
    the answer needs: ``model.safetensors``'s header, or the index (:func:`download_any_json`) and each shard's header
    (:func:`safetensors_header`, in parallel), gathered in file-name order so the result is the same every run.
    Without it, ``get_safetensors_metadata`` (which first HEADs both names to find which exists).

    ``folder``: the weights of a module saved in a folder of the repo (a sentence-transformers ``Dense`` in
    ``2_Dense/``); the file names in the answer are relative to it. Only with ``files``."""
    from huggingface_hub.errors import NotASafetensorsRepoError, SafetensorsParsingError

    try:
        with hub_errors(repo_id, revision, token_given=token is not None, what="safetensors weights"):
            if files:
                return _listed_safetensors(repo_id, revision=revision, token=token, timeout=timeout, files=files, folder=folder)
            if folder:
                return None
            from huggingface_hub import get_safetensors_metadata

            return get_safetensors_metadata(repo_id, revision=revision, token=token, timeout=timeout)
    except (NotASafetensorsRepoError, SafetensorsParsingError, NoConfigError) as exc:
        logger.info("no usable safetensors headers for %s: %s", repo_id, type(exc).__name__)
        return None
    except EstimatorError:
        raise
    except (TypeError, ValueError, KeyError, AttributeError, RecursionError) as exc:  # the client's parser on a malformed header
        raise MalformedConfigError(f"The safetensors headers of {repo_id} are malformed ({type(exc).__name__}: {exc}).", model_id=repo_id, revision=revision) from None


def resolve_url(repo_id: str, filename: str, revision: str | None) -> str:
    """``hf_hub_url``'s answer for a model repo (``constants.HUGGINGFACE_CO_URL_TEMPLATE``), without importing
    ``file_download`` for it."""
    from urllib.parse import quote

    from huggingface_hub import constants

    return constants.HUGGINGFACE_CO_URL_TEMPLATE.format(repo_id=repo_id, revision=quote(revision or constants.DEFAULT_REVISION, safe=""),
                                                        filename=quote(filename))


SAFETENSORS_SINGLE_FILE = "model.safetensors"  # huggingface_hub.constants' names, without importing the client for them
SAFETENSORS_INDEX_FILE = "model.safetensors.index.json"
_FIRST_READ = 100_000  # bytes of a header read at once, as HfApi.parse_safetensors_file_metadata reads them


def safetensors_header(repo_id: str, filename: str, *, revision: str | None, token: str | None, timeout: float) -> Any:
    """``HfApi.parse_safetensors_file_metadata``'s requests (the first 100 kB, then the rest of a longer header) and its
    answer, a ``SafetensorsFileMetadata`` of the client's own classes; ``SafetensorsParsingError`` for a header it
    cannot read, as there."""
    import struct

    from huggingface_hub import constants, get_session
    from huggingface_hub.errors import SafetensorsParsingError
    from huggingface_hub.utils import SafetensorsFileMetadata, TensorInfo, build_hf_headers, hf_raise_for_status

    url, headers = resolve_url(repo_id, filename, revision), build_hf_headers(token=token)
    response = get_session().get(url, headers={**headers, "range": f"bytes=0-{_FIRST_READ}"}, timeout=timeout, follow_redirects=True)
    hf_raise_for_status(response)
    first = response.content
    if len(first) < 8:
        raise SafetensorsParsingError(f"{filename} of {repo_id} is too small to be a safetensors file.")
    (size,) = struct.unpack("<Q", first[:8])
    if size > constants.SAFETENSORS_MAX_HEADER_LENGTH:
        raise SafetensorsParsingError(f"The safetensors header of {filename} of {repo_id} is too big ({size} bytes).")
    if size <= len(first) - 8:
        raw = first[8 : 8 + size]
    else:
        response = get_session().get(url, headers={**headers, "range": f"bytes=8-{size + 7}"}, timeout=timeout, follow_redirects=True)
        hf_raise_for_status(response)
        raw = response.content
    try:
        header = json.loads(raw.decode(errors="ignore"))
        return SafetensorsFileMetadata(metadata=header.get("__metadata__", {}), tensors={
            name: TensorInfo(dtype=info["dtype"], shape=info["shape"], data_offsets=tuple(info["data_offsets"]))
            for name, info in header.items() if name != "__metadata__"})
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise SafetensorsParsingError(f"The safetensors header of {filename} of {repo_id} cannot be parsed ({exc}).") from None


def _listed_safetensors(repo_id: str, *, revision: str | None, token: str | None, timeout: float, files: tuple[str, ...],
                        folder: str = "") -> SafetensorsRepoMetadata | None:
    """``get_safetensors_metadata``'s answer for a repo whose file list is known, without its existence probes."""
    from concurrent.futures import ThreadPoolExecutor

    from huggingface_hub import constants
    from huggingface_hub.utils import SafetensorsRepoMetadata

    def path(name: str) -> str:
        return f"{folder}/{name}" if folder else name

    if path(constants.SAFETENSORS_SINGLE_FILE) in files:
        single = safetensors_header(repo_id, path(constants.SAFETENSORS_SINGLE_FILE), revision=revision, token=token, timeout=timeout)
        return SafetensorsRepoMetadata(metadata=None, sharded=False, weight_map=dict.fromkeys(single.tensors, constants.SAFETENSORS_SINGLE_FILE),
                                       files_metadata={constants.SAFETENSORS_SINGLE_FILE: single})
    if path(constants.SAFETENSORS_INDEX_FILE) not in files:
        return None
    index = download_any_json(repo_id, path(constants.SAFETENSORS_INDEX_FILE), revision=revision, token=token, timeout=timeout)
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict):
        raise MalformedConfigError(f"{path(constants.SAFETENSORS_INDEX_FILE)} of {repo_id} has no weight_map.", model_id=repo_id, revision=revision)
    shards = sorted(set(map(str, weight_map.values())))

    def parse(filename: str) -> Any:
        return safetensors_header(repo_id, path(filename), revision=revision, token=token, timeout=timeout)

    with ThreadPoolExecutor(max_workers=min(8, max(1, len(shards)))) as pool:
        parsed = list(pool.map(parse, shards))
    return SafetensorsRepoMetadata(metadata=index.get("metadata"), sharded=True, weight_map=weight_map,
                                   files_metadata=dict(zip(shards, parsed, strict=True)))


def file_sizes(repo_id: str, paths: list[str], *, revision: str | None, token: str | None, timeout: float = DEFAULT_TIMEOUT_S) -> dict[str, int]:
    """The size the Hub declares for each of ``paths`` (LFS size where the file is in LFS)."""
    from huggingface_hub import HfApi

    with hub_errors(repo_id, revision, token_given=token is not None, what="file sizes"):
        info = HfApi().model_info(repo_id, revision=revision, token=token, files_metadata=True, timeout=timeout)
    wanted = set(paths)
    sizes = {}
    for item in info.siblings or []:
        if item.rfilename not in wanted:
            continue
        size = item.size
        if item.lfs is not None and item.lfs.size:
            size = item.lfs.size
        if size is not None:
            sizes[item.rfilename] = int(size)
    missing = [p for p in paths if p not in sizes]
    if missing:
        raise HubError(f"The Hub did not give the size of {', '.join(missing)} in {repo_id}.", model_id=repo_id)
    return sizes


def read_range(
    repo_id: str, filename: str, start: int, stop: int, *, revision: str | None, token: str | None, timeout: float = DEFAULT_TIMEOUT_S,
) -> bytes:
    """Bytes ``[start, stop)`` of ``filename`` (fewer at the end of the file), by an HTTP Range request.

    The file's resolve URL (``hf_hub_url``) read through the client's public session, following
    the redirect to the storage backend as ``hf_hub_download`` does; nothing is cached on disk.
    """
    from huggingface_hub import get_session, hf_hub_url
    from huggingface_hub.utils import build_hf_headers, hf_raise_for_status

    url = hf_hub_url(repo_id, filename, revision=revision)
    headers = {**build_hf_headers(token=token), "Range": f"bytes={start}-{stop - 1}"}
    with hub_errors(repo_id, revision, token_given=token is not None, what=filename), \
            get_session().stream("GET", url, headers=headers, timeout=timeout, follow_redirects=True) as response:
        if response.status_code == 416:  # start at or past the end of the file
            return b""
        if response.status_code >= 400:
            response.read()
            hf_raise_for_status(response)
        # a server that ignores Range answers 200 with the whole file: read only as far as needed
        skip = start if response.status_code == 200 else 0
        chunks: list[bytes] = []
        got = 0
        for chunk in response.iter_bytes():
            chunks.append(chunk)
            got += len(chunk)
            if got >= skip + stop - start:
                break
    return b"".join(chunks)[skip : skip + stop - start]


@dataclass(frozen=True)
class DiscussionLink:
    """A discussion on a model repo: its number and its page."""

    num: int
    url: str


def _discussions_url(repo_id: str) -> str:
    return f"{endpoint()}/api/models/{repo_id}/discussions"


def find_discussion(repo_id: str, title: str, *, token: str | None, timeout: float = DEFAULT_TIMEOUT_S) -> DiscussionLink | None:
    """The first discussion (not pull request, open or closed) on model ``repo_id`` titled ``title``, if any.

    The request ``HfApi.get_repo_discussions`` makes, page by page, each with ``timeout``.
    """
    from huggingface_hub import get_session
    from huggingface_hub.utils import build_hf_headers, hf_raise_for_status

    headers = build_hf_headers(token=token)
    page = 0
    with hub_errors(repo_id, None, token_given=token is not None, what="the discussions", posting="read the discussions of"):
        while True:
            response = get_session().get(_discussions_url(repo_id), params={"p": page}, headers=headers, timeout=timeout)
            hf_raise_for_status(response)
            listing = response.json()
            found = listing.get("discussions") or []
            for item in found:
                if item.get("title") == title and not item.get("isPullRequest"):
                    num = int(item["num"])
                    return DiscussionLink(num=num, url=f"{endpoint()}/{repo_id}/discussions/{num}")
            if not found or int(listing.get("start", 0)) + len(found) >= int(listing.get("count", 0)):
                return None
            page += 1


def open_discussion(repo_id: str, title: str, description: str, *, token: str, timeout: float = DEFAULT_TIMEOUT_S) -> DiscussionLink:
    """Open a discussion on model ``repo_id`` with ``token`` (write-discussions); return where it is.

    The request ``HfApi.create_discussion`` makes, with ``timeout``. A timeout does not say the
    Hub did not take the post: look for it (:func:`find_discussion`) before posting again.
    """
    from huggingface_hub import get_session
    from huggingface_hub.utils import build_hf_headers, hf_raise_for_status

    if not token:
        raise PostingError("Opening a discussion needs a token with the write-discussions permission.", model_id=repo_id)
    payload = {"title": title.strip(), "description": description.strip(), "pullRequest": False}
    with hub_errors(repo_id, None, token_given=True, what="the discussions", posting="open a discussion on"):
        response = get_session().post(_discussions_url(repo_id), json=payload, headers=build_hf_headers(token=token), timeout=timeout)
        hf_raise_for_status(response)
        num = int(response.json()["num"])
    logger.info("opened discussion #%s on %s", num, repo_id)
    return DiscussionLink(num=num, url=f"{endpoint()}/{repo_id}/discussions/{num}")
