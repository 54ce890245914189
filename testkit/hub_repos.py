"""Repository data model of the Hub stand-in (stdlib only; see tests/hub_server.py for the served list).

Loads ``tests/hub_data/repos.json``: each repo is a folder of real files (exact fixture copies or
fixture-repo files) plus *virtual* files whose bytes are generated on demand:

* header-only safetensors: 8-byte little-endian header length + JSON header (``__metadata__`` +
  dtype/shape/data_offsets per tensor, padded with spaces to a multiple of 8) followed by zero bytes up
  to the full declared size. Shapes come from ``tests/hub_data/shapes/*.json`` (make_shapes.py);
* declared-size blobs (GGUF): a GGUF v3 magic, zero tensor/kv counts, then zeros;
* GGUF files (``gguf_headers``): a real header written by gguf-py (``tests/hub_data/gguf/<repo>/<file>.header``,
  made by ``testkit/gguf_models.py``), then zeros up to the size the header implies (``tests/hub_data/gguf/manifest.json``):
  valid GGUF files whose tensors are all zeros.

A repo's ``overlay`` folder (``hub_data/reconstructed/<org>/<name>/``) is served on top of its ``dir``; its
``reconstructed`` list (plus every shard named by a reconstructed index) is model_info's
``standin_reconstructed``: the files that are reconstructions rather than byte-exact Hub copies.

Only the requested byte range of a virtual file is ever materialised.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DATA_DIR = Path(__file__).resolve().parent.parent / "tests" / "hub_data"
DEFAULT_DATE = "2024-01-01T00:00:00.000Z"
DTYPE_SIZE = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "U8": 1, "BOOL": 1}
LFS_SUFFIXES = (".safetensors", ".gguf", ".bin", ".pt", ".pth", ".onnx", ".h5", ".msgpack")
CHUNK = 1 << 20


def git_blob_sha1(data: bytes) -> str:
    """The Hub's id for a non-LFS file: ``sha1(b"blob <len>\\0" + data)``."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    """The git-LFS pointer file the Hub stores in git for an LFS file."""
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


@dataclass
class RepoFile:
    """One file of a repo: real bytes (``data``) or a virtual file (``prefix`` then zeros to ``size``)."""

    path: str
    size: int
    data: bytes | None = None
    prefix: bytes = b""
    sha256: str = ""

    @property
    def is_lfs(self) -> bool:
        """Virtual (large) files are served the way the Hub serves LFS files."""
        return self.data is None

    @property
    def etag(self) -> str:
        """ETag: git blob sha1 for regular files, sha256 of the content for LFS files."""
        return self.sha256 if self.is_lfs else git_blob_sha1(self.data or b"")

    @property
    def blob_id(self) -> str:
        """Git blob id (of the pointer file for LFS files)."""
        if self.is_lfs:
            return git_blob_sha1(lfs_pointer(self.sha256, self.size))
        return git_blob_sha1(self.data or b"")

    def lfs_info(self) -> dict[str, Any] | None:
        """``lfs`` block of tree listings / siblings, or None for regular files."""
        if not self.is_lfs:
            return None
        return {"oid": self.sha256, "size": self.size, "pointerSize": len(lfs_pointer(self.sha256, self.size))}

    def iter_range(self, start: int, stop: int) -> Iterator[bytes]:
        """Yield the bytes ``[start, stop)`` in chunks of at most 1 MiB."""
        if self.data is not None:
            for pos in range(start, stop, CHUNK):
                yield self.data[pos : min(stop, pos + CHUNK)]
            return
        pos = start
        while pos < stop:
            end = min(stop, pos + CHUNK)
            head = self.prefix[pos:end] if pos < len(self.prefix) else b""
            yield head + bytes(end - pos - len(head))
            pos = end


def safetensors_file(path: str, tensors: dict[str, list[Any]], salt: str) -> RepoFile:
    """A header-only safetensors file for ``{name: [dtype, shape]}`` (tensors laid out in name order)."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name in sorted(tensors):
        dtype, shape = tensors[name]
        nbytes = math.prod(shape) * DTYPE_SIZE[dtype]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    prefix = struct.pack("<Q", len(raw)) + raw
    # The real sha256 would need the full (GB-sized) content: use a deterministic stand-in digest.
    digest = hashlib.sha256(f"{salt}:{path}:".encode() + prefix).hexdigest()
    return RepoFile(path=path, size=len(prefix) + offset, prefix=prefix, sha256=digest)


def gguf_file(path: str, size: int, salt: str) -> RepoFile:
    """A declared-size GGUF blob: magic ``GGUF``, version 3, zero tensors, zero metadata entries."""
    prefix = b"GGUF" + struct.pack("<IQQ", 3, 0, 0)
    digest = hashlib.sha256(f"{salt}:{path}:{size}".encode()).hexdigest()
    return RepoFile(path=path, size=size, prefix=prefix, sha256=digest)


@dataclass
class Repo:
    """A served model repo."""

    id: str
    sha: str
    meta: dict[str, Any]
    files: dict[str, RepoFile] = field(default_factory=dict)
    param_counts: dict[str, int] | None = None
    info_base: dict[str, Any] | None = None
    reconstructed: list[str] = field(default_factory=list)  # paths that are reconstructions, not Hub copies

    @property
    def gated(self) -> str | bool:
        """``False`` or the gating mode (``"manual"``)."""
        return self.meta.get("gated", False)

    @property
    def private(self) -> bool:
        """Private repos are visible to the approved token only."""
        return bool(self.meta.get("private", False))

    @property
    def fault(self) -> str | None:
        """Fault mode name (``rate-limited``, ``server-error``, ``slow``) or None."""
        return self.meta.get("fault")

    def resolve_revision(self, revision: str) -> str | None:
        """The commit sha for ``main`` / ``refs/heads/main`` / the sha itself, else None."""
        if revision in ("main", "refs/heads/main", self.sha):
            return self.sha
        return None


def load_shapes(name: str) -> dict[str, list[Any]]:
    """A repo's tensor table, ``{name: [DTYPE, shape]}`` (tests/hub_data/shapes/<name>.json)."""
    return json.loads((DATA_DIR / "shapes" / f"{name}.json").read_text())


def _count(tensors: dict[str, list[Any]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for dtype, shape in tensors.values():
        out[dtype] = out.get(dtype, 0) + math.prod(shape)
    return out


def load_repo(meta: dict[str, Any]) -> Repo:
    """Build one Repo from its manifest entry."""
    repo_id = meta["id"]
    sha = meta.get("sha") or hashlib.sha1(repo_id.encode()).hexdigest()
    repo = Repo(id=repo_id, sha=sha, meta=meta, reconstructed=list(meta.get("reconstructed") or []))
    # ``overlay``: files served on top of ``dir`` (reconstructed files kept out of the exact-copy folders)
    for root in [DATA_DIR / meta["dir"]] + ([DATA_DIR / meta["overlay"]] if meta.get("overlay") else []):
        for dirpath, _dirs, names in os.walk(root):
            for name in names:
                full = Path(dirpath) / name
                rel = full.relative_to(root).as_posix()
                data = full.read_bytes()
                repo.files[rel] = RepoFile(path=rel, size=len(data), data=data)
    kind = meta.get("safetensors")
    if kind:
        tensors = load_shapes(meta.get("shapes", repo_id.replace("/", "__")))
        repo.param_counts = _count(tensors)
        if kind == "single":
            repo.files["model.safetensors"] = safetensors_file("model.safetensors", tensors, repo_id)
        else:
            index = json.loads(repo.files["model.safetensors.index.json"].data or b"{}")
            shards: dict[str, dict[str, list[Any]]] = {}
            for name, shard in index["weight_map"].items():
                shards.setdefault(shard, {})[name] = tensors[name]
            for shard, members in shards.items():
                repo.files[shard] = safetensors_file(shard, members, repo_id)
            if "model.safetensors.index.json" in repo.reconstructed:
                repo.reconstructed += sorted(shards)  # shard names/contents follow the reconstructed index
    for path, size in (meta.get("virtual_files") or {}).items():
        repo.files[path] = gguf_file(path, size, repo_id)
    if meta.get("gguf_headers"):
        sizes = json.loads((DATA_DIR / "gguf" / "manifest.json").read_text())[repo_id]
        for path, size in sizes.items():
            prefix = (DATA_DIR / "gguf" / repo_id / f"{path}.header").read_bytes()
            digest = hashlib.sha256(f"{repo_id}:{path}:".encode() + prefix).hexdigest()
            repo.files[path] = RepoFile(path=path, size=size, prefix=prefix, sha256=digest)
    repo.files = dict(sorted(repo.files.items()))
    if meta.get("model_info_base"):
        recorded = json.loads((DATA_DIR / meta["model_info_base"]).read_text())
        repo.info_base = recorded["response"]["body"]
    return repo


def load_repos() -> tuple[dict[str, Repo], dict[str, str]]:
    """All repos by id, and the legacy-alias -> canonical id map."""
    manifest = json.loads((DATA_DIR / "repos.json").read_text())
    repos: dict[str, Repo] = {}
    aliases: dict[str, str] = {}
    for meta in manifest["repos"]:
        repo = load_repo(meta)
        repos[repo.id] = repo
        for alias in meta.get("aliases", []):
            aliases[alias] = repo.id
    return repos, aliases


# --------------------------------------------------------------------------- API documents


def _config_summary(repo: Repo) -> dict[str, Any] | None:
    """The ``config`` field of model_info, as the Hub derives it from config.json."""
    if "config" in repo.meta:
        return repo.meta["config"]
    cfg_file = repo.files.get("config.json")
    if cfg_file is None or cfg_file.data is None:
        return None
    try:
        cfg = json.loads(cfg_file.data)
    except ValueError:
        return None
    if repo.meta.get("library_name") == "timm":
        return cfg
    out: dict[str, Any] = {k: cfg[k] for k in ("architectures", "model_type", "auto_map") if k in cfg}
    if isinstance(cfg.get("quantization_config"), dict):
        out["quantization_config"] = {"quant_method": cfg["quantization_config"].get("quant_method")}
    out["tokenizer_config"] = {}
    return out


def _tags(repo: Repo, config: dict[str, Any] | None) -> list[str]:
    library = repo.meta.get("library_name", "transformers")
    tags = [library] if library else []
    if repo.param_counts:
        tags.append("safetensors")
    if config and config.get("model_type"):
        tags.append(config["model_type"])
    if repo.meta.get("pipeline_tag"):
        tags.append(repo.meta["pipeline_tag"])
    if config and "auto_map" in config:
        tags.append("custom_code")
    tags += [t for t in repo.meta.get("extra_tags", []) if t not in tags]
    return tags + ["region:us"]


def sibling(file: RepoFile, blobs: bool) -> dict[str, Any]:
    """One ``siblings`` entry of model_info."""
    entry: dict[str, Any] = {"rfilename": file.path}
    if blobs:
        entry["size"] = file.size
        entry["blobId"] = file.blob_id
        lfs = file.lfs_info()
        if lfs:
            entry["lfs"] = {"size": lfs["size"], "sha256": lfs["oid"], "pointerSize": lfs["pointerSize"]}
    return entry


def model_info(repo: Repo, expand: list[str] | None = None, blobs: bool = False) -> dict[str, Any]:
    """The ``GET /api/models/{id}`` document (only ``_id``, ``id`` + requested keys with ``expand``)."""
    config = _config_summary(repo)
    info: dict[str, Any] = dict(repo.info_base or {})
    info.update(
        {
            "_id": info.get("_id") or hashlib.sha1(repo.id.encode()).hexdigest()[:24],
            "id": repo.id,
            "modelId": repo.id,
            "author": repo.id.split("/")[0],
            "sha": repo.sha,
            "private": repo.private,
            "gated": repo.gated,
            "disabled": False,
            "library_name": repo.meta.get("library_name", "transformers"),
            "pipeline_tag": repo.meta.get("pipeline_tag"),
            "lastModified": repo.meta.get("last_modified", info.get("lastModified", DEFAULT_DATE)),
            "createdAt": repo.meta.get("created_at", info.get("createdAt", DEFAULT_DATE)),
            "siblings": [sibling(f, blobs) for f in repo.files.values()],
        }
    )
    info.setdefault("downloads", 0)
    info.setdefault("likes", 0)
    if repo.info_base is None:
        info["tags"] = _tags(repo, config)
    if config is not None:
        info["config"] = config
    else:
        info.pop("config", None)
    if repo.param_counts:
        info["safetensors"] = {"parameters": repo.param_counts, "total": sum(repo.param_counts.values())}
    else:
        info.pop("safetensors", None)
    if repo.meta.get("gguf"):
        info["gguf"] = repo.meta["gguf"]
    if repo.reconstructed:
        info["standin_reconstructed"] = sorted(repo.reconstructed)
    info = {k: v for k, v in info.items() if v is not None or k in ("pipeline_tag",)}
    if expand:
        return {"_id": info["_id"], "id": repo.id, **{k: info[k] for k in expand if k in info}}
    return info


def sharded_safetensors_metadata(repo: Repo, index_path: str) -> dict[str, Any] | None:
    """``GET /api/models/{id}/safetensors-metadata/{index}``: the index (minus weight_map) + every shard header."""
    index_file = repo.files.get(index_path)
    if index_file is None or index_file.data is None or not index_path.endswith(".safetensors.index.json"):
        return None
    index = json.loads(index_file.data)
    folder = index_path.rsplit("/", 1)[0] + "/" if "/" in index_path else ""
    headers = {}
    for shard in sorted(set(index["weight_map"].values())):
        file = repo.files.get(folder + shard)
        if file is None or not file.prefix:
            return None
        headers[shard] = json.loads(file.prefix[8:])
    return {"index": {k: v for k, v in index.items() if k != "weight_map"}, "headers": headers}


def file_entry(file: RepoFile) -> dict[str, Any]:
    """A tree / paths-info entry for one file."""
    entry: dict[str, Any] = {"type": "file", "oid": file.blob_id, "size": file.size, "path": file.path}
    lfs = file.lfs_info()
    if lfs:
        entry["lfs"] = lfs
    return entry


def _dir_entry(path: str) -> dict[str, Any]:
    return {"type": "directory", "oid": git_blob_sha1(path.encode()), "size": 0, "path": path}


def paths_info(repo: Repo, paths: list[str]) -> list[dict[str, Any]]:
    """``POST /api/models/{id}/paths-info/{rev}``: entries for the existing paths (files or folders)."""
    out = []
    for path in paths:
        path = path.strip("/")
        if path in repo.files:
            out.append(file_entry(repo.files[path]))
        elif path and any(p.startswith(path + "/") for p in repo.files):
            out.append(_dir_entry(path))
    return out


def tree(repo: Repo, prefix: str, recursive: bool) -> list[dict[str, Any]] | None:
    """``GET /api/models/{id}/tree/{rev}/{prefix}`` entries, or None when ``prefix`` does not exist."""
    prefix = prefix.strip("/")
    base = prefix + "/" if prefix else ""
    if prefix and prefix in repo.files:
        return None
    entries: dict[str, dict[str, Any]] = {}
    for path, file in repo.files.items():
        if not path.startswith(base):
            continue
        rest = path[len(base) :].split("/")
        for depth in range(1, len(rest)):
            if not recursive and depth > 1:
                break
            sub = base + "/".join(rest[:depth])
            entries.setdefault(sub, _dir_entry(sub))
        if recursive or len(rest) == 1:
            entries[path] = file_entry(file)
    if prefix and not entries:
        return None
    return [entries[k] for k in sorted(entries)]
