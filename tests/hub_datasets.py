"""In-memory dataset repos of the Hub stand-in (stdlib only): created and committed to by the real
``huggingface_hub`` client (``create_repo(repo_type="dataset")``, ``upload_folder``), then served
back (``dataset_info``, ``list_repo_files``, ``hf_hub_download``, ``snapshot_download``).

Endpoints (``{id}`` = ``org/name``):

* ``POST /api/validate-yaml`` (a README's front matter, checked before an upload): 200 when it opens and closes with ``---``.
* ``POST /api/repos/create`` ``{"name", "organization", "type": "dataset"}`` -> 200 ``{"url"}``; 409 (with
  ``url``) when it exists. Needs a write token (``hf_standin_user``); other types are refused 400 here.
* ``POST /api/datasets/{id}/preupload/{rev}`` -> every file ``"uploadMode": "regular"`` (the stand-in
  takes file contents inline in the commit; it has no LFS or Xet storage, so ``lfsFile`` lines are
  refused 400 — the Hub itself would ask for LFS above a few MB or for binary files), with the git
  blob ``oid`` of a path it already holds so that unchanged files are skipped as on the Hub.
* ``POST /api/datasets/{id}/commit/{rev}`` (NDJSON: ``header``, ``file`` base64, ``deletedFile``,
  ``deletedFolder``) -> ``{"commitOid", "commitUrl"}``; a ``parentCommit`` that is not the head -> 412.
* ``GET /api/datasets/{id}[/revision/{rev}]``, ``GET /api/datasets/{id}/tree/{rev}[/{path}]``,
  ``HEAD|GET /datasets/{id}/resolve/{rev}/{path}``; public reads, commits need the write token.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

WRITE_ROLES = ("write",)


class DatasetError(Exception):
    def __init__(self, status: int, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.code = status, message, code


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class DatasetRepo:
    id: str
    author: str
    sha: str
    files: dict[str, bytes] = field(default_factory=dict)
    commits: list[dict[str, Any]] = field(default_factory=list)
    last_modified: str = ""


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z")


class DatasetStore:
    """Thread-safe dataset repos, created and committed to by clients."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.repos: dict[str, DatasetRepo] = {}

    def reset(self) -> None:
        with self._lock:
            self.repos.clear()

    # ------------------------------------------------------------------ writes
    @staticmethod
    def _writer(user: dict[str, Any] | None) -> dict[str, Any]:
        if user is None:
            raise DatasetError(401, "Invalid username or password.")
        if user["role"] not in WRITE_ROLES:
            raise DatasetError(403, "You don't have the rights to create or write to this repository (a read token).")
        return user

    def create(self, user: dict[str, Any] | None, body: dict[str, Any], endpoint: str) -> tuple[int, dict[str, Any]]:
        user = self._writer(user)
        if body.get("type") != "dataset":
            raise DatasetError(400, "The stand-in creates dataset repos only (type 'dataset').")
        name, org = body.get("name"), body.get("organization") or user["name"]
        if not isinstance(name, str) or not name or "/" in name:
            raise DatasetError(400, "Invalid repo name.")
        repo_id = f"{org}/{name}"
        url = {"url": f"{endpoint}/datasets/{repo_id}", "name": repo_id}
        with self._lock:
            if repo_id in self.repos:
                return 409, {**url, "error": "You already created this dataset repo"}
            sha = hashlib.sha1(f"init:{repo_id}".encode()).hexdigest()
            self.repos[repo_id] = DatasetRepo(id=repo_id, author=org, sha=sha, last_modified=_now(),
                                              commits=[{"id": sha, "title": "initial commit"}])
        return 200, url

    def preupload(self, user: dict[str, Any] | None, repo_id: str, revision: str, body: dict[str, Any]) -> dict[str, Any]:
        self._writer(user)
        repo = self.get(repo_id)
        self._check_revision(repo, revision)
        files = body.get("files") or []
        out = []
        for entry in files:
            path = entry.get("path")
            held = repo.files.get(path)
            out.append({"path": path, "uploadMode": "regular", "shouldIgnore": False, "oid": git_blob_sha1(held) if held is not None else None})
        return {"files": out, "commitOid": repo.sha}

    def commit(self, user: dict[str, Any] | None, repo_id: str, revision: str, body: bytes, endpoint: str) -> dict[str, Any]:
        self._writer(user)
        lines = [json.loads(line) for line in body.splitlines() if line.strip()]
        if not lines or lines[0].get("key") != "header":
            raise DatasetError(400, "A commit starts with a header line.")
        header = lines[0]["value"]
        with self._lock:
            repo = self.get(repo_id)
            self._check_revision(repo, revision)
            parent = header.get("parentCommit")
            if parent and parent != repo.sha:
                raise DatasetError(412, f"Commit {parent} is not the head of {revision}.")
            files = dict(repo.files)
            for line in lines[1:]:
                key, value = line.get("key"), line.get("value") or {}
                if key == "file":
                    if value.get("encoding") != "base64":
                        raise DatasetError(400, "file content must be base64")
                    files[value["path"]] = base64.b64decode(value["content"])
                elif key == "deletedFile":
                    if value["path"] not in files:
                        raise DatasetError(404, "A file with this name doesn't exist", "EntryNotFound")
                    del files[value["path"]]
                elif key == "deletedFolder":
                    prefix = value["path"].rstrip("/") + "/"
                    files = {p: b for p, b in files.items() if not p.startswith(prefix)}
                elif key == "lfsFile":
                    raise DatasetError(400, "The stand-in has no LFS storage: it answers preupload with 'regular' for every file.")
                else:
                    raise DatasetError(400, f"Unknown commit line {key!r}.")
            digest = hashlib.sha1(repo.sha.encode() + body).hexdigest()
            repo.files, repo.sha, repo.last_modified = files, digest, _now()
            repo.commits.append({"id": digest, "title": header.get("summary", "")})
        return {"success": True, "commitOid": digest, "commitUrl": f"{endpoint}/datasets/{repo_id}/commit/{digest}", "commitMessage": header.get("summary")}

    # ------------------------------------------------------------------ reads
    def get(self, repo_id: str) -> DatasetRepo:
        repo = self.repos.get(repo_id)
        if repo is None:
            raise DatasetError(404, "Repository not found", "RepoNotFound")
        return repo

    @staticmethod
    def _check_revision(repo: DatasetRepo, revision: str) -> None:
        if revision not in ("main", repo.sha):
            raise DatasetError(404, f"Invalid rev id: {revision}", "RevisionNotFound")

    def info(self, repo_id: str, revision: str = "main") -> dict[str, Any]:
        repo = self.get(repo_id)
        self._check_revision(repo, revision)
        return {"_id": hashlib.md5(repo_id.encode()).hexdigest()[:24], "id": repo_id, "author": repo.author, "sha": repo.sha,
                "private": False, "gated": False, "disabled": False, "downloads": 0, "likes": 0, "tags": [],
                "lastModified": repo.last_modified, "createdAt": repo.last_modified,
                "siblings": [{"rfilename": p, "size": len(b)} for p, b in sorted(repo.files.items())]}

    def tree(self, repo_id: str, revision: str, prefix: str, recursive: bool) -> list[dict[str, Any]]:
        repo = self.get(repo_id)
        self._check_revision(repo, revision)
        prefix = prefix.strip("/")
        entries: dict[str, dict[str, Any]] = {}
        for path, data in sorted(repo.files.items()):
            if prefix and not path.startswith(prefix + "/"):
                continue
            rest = path[len(prefix) + 1:] if prefix else path
            if "/" in rest and not recursive:
                folder = (prefix + "/" if prefix else "") + rest.split("/", 1)[0]
                entries[folder] = {"type": "directory", "path": folder, "oid": hashlib.sha1(folder.encode()).hexdigest(), "size": 0}
                continue
            if recursive:
                parts = rest.split("/")[:-1]
                for i in range(len(parts)):
                    folder = "/".join(([prefix] if prefix else []) + parts[: i + 1])
                    entries[folder] = {"type": "directory", "path": folder, "oid": hashlib.sha1(folder.encode()).hexdigest(), "size": 0}
            entries[path] = {"type": "file", "path": path, "oid": git_blob_sha1(data), "size": len(data)}
        if prefix and not entries:
            raise DatasetError(404, f"{prefix} does not exist", "EntryNotFound")
        return list(entries.values())

    def file(self, repo_id: str, revision: str, path: str) -> tuple[str, bytes]:
        repo = self.get(repo_id)
        self._check_revision(repo, revision)
        data = repo.files.get(path)
        if data is None:
            raise DatasetError(404, "Entry not found", "EntryNotFound")
        return repo.sha, data


# ---------------------------------------------------------------------- routing (called by tests/hub_server.py)
def route(handler: Any, method: str, segs: list[str]) -> bool:
    """Answer the dataset endpoints and ``GET /api/models`` (the model list); False for any other path."""
    store: DatasetStore = handler.state.datasets
    endpoint = f"http://{handler.headers.get('Host', '127.0.0.1')}"
    if segs == ["api", "models"] and method == "GET":
        handler._send_json(200, model_list(handler.state.repos, handler.query))
        return True
    if segs == ["api", "validate-yaml"] and method == "POST":
        content = str(json.loads(handler.body or b"{}").get("content", ""))
        closed = content.startswith("---\n") and "\n---" in content[4:]
        handler._send_json(200 if closed else 400, {"errors": [] if closed else [{"message": "no closed YAML front matter (--- ... ---)"}],
                                                  "warnings": []})
        return True
    if segs == ["api", "repos", "create"] and method == "POST":
        status, obj = store.create(handler.user, json.loads(handler.body or b"{}"), endpoint)
        handler._send_json(status, obj, {"X-Error-Message": obj["error"]} if status == 409 else None)
        return True
    if len(segs) >= 4 and segs[:2] == ["api", "datasets"]:
        repo_id, tail = "/".join(segs[2:4]), segs[4:]
        if not tail and method == "GET":
            handler._send_json(200, store.info(repo_id))
        elif tail[:1] == ["revision"] and len(tail) >= 2 and method == "GET":
            handler._send_json(200, store.info(repo_id, "/".join(tail[1:])))
        elif tail[:1] == ["preupload"] and len(tail) >= 2 and method == "POST":
            handler._send_json(200, store.preupload(handler.user, repo_id, "/".join(tail[1:]), json.loads(handler.body or b"{}")))
        elif tail[:1] == ["commit"] and len(tail) >= 2 and method == "POST":
            handler._send_json(200, store.commit(handler.user, repo_id, "/".join(tail[1:]), handler.body, endpoint))
        elif tail[:1] == ["tree"] and len(tail) >= 2 and method == "GET":
            recursive = handler.query.get("recursive", ["false"])[0].lower() in ("true", "1")
            handler._send_json(200, store.tree(repo_id, tail[1], "/".join(tail[2:]), recursive), {"X-Repo-Commit": store.get(repo_id).sha})
        else:
            raise DatasetError(404, "Not Found")
        return True
    if len(segs) >= 6 and segs[0] == "datasets" and segs[3] == "resolve" and method in ("GET", "HEAD"):
        sha, data = store.file("/".join(segs[1:3]), segs[4], "/".join(segs[5:]))
        handler.send_response(200)
        handler._common_headers()
        handler.send_header("X-Repo-Commit", sha)
        handler.send_header("ETag", f'"{git_blob_sha1(data)}"')
        handler.send_header("Content-Type", "application/octet-stream")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        if method == "GET":
            handler.wfile.write(data)
        return True
    return False


def model_list(repos: dict[str, Any], query: dict[str, list[str]]) -> list[dict[str, Any]]:
    """``GET /api/models``: the served model repos matching ``search`` (in the id), ``pipeline_tag`` and
    ``filter`` (a library or tag), in id order (the stand-in has no download counts, so ``sort`` keeps that order)."""
    search = (query.get("search") or [""])[0].lower()
    tag = (query.get("pipeline_tag") or [None])[0]
    filters = query.get("filter") or []
    limit = int((query.get("limit") or ["1000"])[0])
    out = []
    for repo_id in sorted(repos):
        repo = repos[repo_id]
        if repo.private or repo.fault:
            continue
        library = repo.meta.get("library_name", "transformers")
        tags = [library, *(repo.meta.get("extra_tags") or [])]
        if search and search not in repo_id.lower():
            continue
        if tag and repo.meta.get("pipeline_tag") != tag:
            continue
        if any(f not in (library, *tags) for f in filters):
            continue
        out.append({"_id": hashlib.md5(repo_id.encode()).hexdigest()[:24], "id": repo_id, "modelId": repo_id, "private": False,
                    "downloads": 0, "likes": 0, "library_name": library, "pipeline_tag": repo.meta.get("pipeline_tag"), "tags": tags,
                    "createdAt": "2024-01-01T00:00:00.000Z"})
        if len(out) >= limit:
            break
    return out
