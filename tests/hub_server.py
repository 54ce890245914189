"""Loopback Hugging Face Hub stand-in (stdlib only) for the real ``huggingface_hub`` / transformers / accelerate.

Run ``python -m tests.hub_server --port PORT`` from the repo root (``--port 0`` picks a free port): it binds
127.0.0.1 only, prints exactly one line ``ready http://127.0.0.1:PORT`` once serving, and serves until
SIGTERM/SIGINT. Point clients at it with ``HF_ENDPOINT=http://127.0.0.1:PORT`` (read at import time).
In-process: ``url, stop = start_server()`` or ``with HubStandIn() as hub: hub.url``.

Repos (data in tests/hub_data/repos.json; revision ``main`` and the 40-hex sha resolve, anything else is
404 ``RevisionNotFound``; sha = the Hub commit named in the fixtures README, else sha1(repo id)):

* exact fixture copies (tests/hub_data/models/): ``FacebookAI/roberta-base`` (legacy id ``roberta-base``),
  ``Qwen/Qwen2.5-7B``, ``bigscience/bloom``, ``deepseek-ai/DeepSeek-R1``, ``google-bert/bert-base-cased``
  (legacy ``bert-base-cased``), ``google/gemma-2b-it``, ``huggyllama/llama-7b``, ``meta-llama/Llama-2-7b-hf``,
  ``meta-llama/Llama-3.1-8B``, ``meta-llama/Llama-3.2-3B``, ``mistralai/Mixtral-8x7B-v0.1``,
  ``openai-community/gpt2`` (legacy ``gpt2``), ``sentence-transformers/all-MiniLM-L6-v2``,
  ``stabilityai/stable-diffusion-xl-base-1.0``. The meta-llama and gemma repos are gated on the real Hub
  but open here (gating is tested through ``estimator-test/gated-model``).
* reconstructed configs (tests/hub_data/models_unverified/): ``meta-llama/Llama-3.1-70B``,
  ``meta-llama/Llama-3.1-405B``, ``mistralai/Mistral-7B-v0.1``, ``google/gemma-7b``, ``deepseek-ai/DeepSeek-V3``;
  and the timm repos ``timm/resnet50.a1_in1k``, ``timm/vit_base_patch16_224.augreg2_in21k_ft_in1k``
  (timm-layout config.json from timm 1.0's pretrained_cfg, library_name ``timm``).
* RECONSTRUCTED sharded indexes (tests/hub_data/reconstructed/<org>/<name>/model.safetensors.index.json,
  written by make_shapes.py and served as an overlay on the repo folder, so the exact copies stay untouched):
  Llama-3.1-70B (30 shards), Llama-3.1-405B (191), Mistral-7B-v0.1 (2), gemma-7b (4), Llama-3.2-3B (2),
  Qwen2.5-7B (4). The family's real key layout, BF16, real shard count/naming and an exact total_size; the
  tensor-to-shard assignment is synthetic (size-balanced, state-dict order), not the real checkpoint's.
* model_info ``standin_reconstructed`` (only on such repos) lists every served file that is a
  reconstruction rather than a byte-exact Hub copy: the configs above, the timm ``model.safetensors``, and
  each reconstructed index together with every shard it names.
* Legacy ids answer 307 with a relative ``Location`` to the canonical id, for /api/models and /resolve URLs.

Header-only safetensors (virtual bytes: real header, then zeros up to the declared size; only the
requested Range is generated; ETag/lfs sha256 is a deterministic stand-in digest, not the content's):
every shard named by ``model.safetensors.index.json`` of bloom (BF16), Mixtral-8x7B (BF16, unfused
``experts.N.w1/w2/w3``), Llama-3.1-8B (BF16), Llama-2-7b-hf and llama-7b (F16 + F32 ``rotary_emb.inv_freq``),
gemma-2b-it (BF16), and the six reconstructed indexes above (BF16; Qwen2.5 with q/k/v biases; gemma-7b
and Llama-3.2-3B tied, no ``lm_head.weight``) -- each matches the index's ``total_size`` exactly; and a
single ``model.safetensors`` (F32) for bert-base-cased (legacy ``bert.*``/``cls.*`` keys with LayerNorm
gamma/beta), gpt2 (with the ``h.N.attn.bias`` mask buffers), roberta-base (+ I64 position_ids),
all-MiniLM-L6-v2 (+ I64 position_ids), the timm repos (timm state dict incl. BatchNorm buffers -- an approximation of the real key set) and the
tiny-llama fixtures. Shapes: tests/hub_data/shapes/ (tests/hub_data/make_shapes.py). Parameter counts
match the Hub's recorded ones where known (bloom 176,247,271,424 BF16; gpt2 137,022,720; roberta
124,697,433 + 514 I64; MiniLM 22,713,216 + 512 I64; bert-base-uncased layout 110,106,428; Llama-3.1-70B
70,553,706,496; Llama-3.1-405B 405,853,388,800; Mistral-7B-v0.1 7,241,732,096; gemma-7b 8,537,680,896;
Llama-3.2-3B 3,212,749,824; Qwen2.5-7B 7,615,616,512).

Config-only repos (no weight files, so no ``safetensors`` in model_info and ``NotASafetensorsRepoError``
from get_safetensors_metadata): DeepSeek-R1/V3 (their ``auto_map`` .py files are not served), SDXL
(pipeline configs only). Llama-2-7b-hf serves ``pytorch_model.bin.index.json`` but not its .bin shards.
all-MiniLM-L6-v2 is at the mirror commit fa97f6e7 (its recorded model_info base says c9745ed1; the served
sha is fa97f6e7 throughout).

Fault-mode repos (``estimator-test/``; each has a tiny Llama config.json unless said otherwise):

* ``gated-model``: ``gated: "manual"``; model_info is public; files: 401 GatedRepo anonymous, 403 GatedRepo
  with ``hf_standin_unapproved``, 200 with ``hf_standin_user`` (has a tiny-llama model.safetensors).
* ``private-model``: 401 RepoNotFound "Invalid username or password." anonymous, 404 RepoNotFound for
  other valid tokens, 200 with ``hf_standin_user``. Any unknown repo id behaves the same (401/404).
* ``no-config``: README.md only; config.json -> 404 EntryNotFound (with X-Repo-Commit).
* ``rate-limited``: 429 on every request with ``RateLimit: "api";r=0;t=N`` (N = $HUB_STANDIN_RATELIMIT_RESET,
  default 0, so that clients that retry do so quickly) and ``RateLimit-Policy``.
* ``server-error``: 503 on every request (``Retry-After: 0``). model_info raises HfHubHTTPError (429/503) at
  once; hf_hub_download retries five times (~1 s apart with these headers, ~5 s in all) and then raises
  LocalEntryNotFoundError (client behaviour: the HTTP error is its ``__cause__``).
* ``slow``: every request delayed by $HUB_STANDIN_SLOW_SECONDS seconds (default 30), then served normally;
  other requests are not blocked (threading server).
* ``malformed-config``: config.json is not valid JSON; ``absurd-config``: llama config with
  ``num_hidden_layers: 1000000000``.
* ``tiny-llama``: hidden 64, 2 layers, vocab 1000, untied, real-shape F32 header-only model.safetensors;
  ``tiny-llama-mismatch``: same config, but the header declares ``model.layers.1.mlp.up_proj.weight``
  as [100, 64] instead of [128, 64].
* ``gguf-only``: library_name ``gguf``, tag ``gguf``, model_info ``gguf`` {architecture, context_length};
  files ``tiny-Q4_K_M.gguf``, ``tiny-Q8_0.gguf`` and ``tiny-F16-0000{1,2}-of-00002.gguf``: a tiny Llama
  llama.cpp loads, real GGUF headers written by gguf-py then zero tensor data (Range requests answered);
  no config.json. ``gguf-gemma3`` (sliding-window layers), ``gguf-qwen3moe`` (MoE), ``gguf-deepseek2`` (MLA) and
  ``Meta-Llama-3.1-8B-Instruct-GGUF`` (8B shapes, header only) alike (``testkit/gguf_models.py``).
* ``remote-code``: config with ``auto_map`` and unknown model_type ``standin_mystery``; its .py files raise
  if executed.

Tokens (``Authorization: Bearer <token>``): ``hf_standin_user`` (user ``standin-user``, write, approved for
gated repos, sees private ones); ``hf_standin_unapproved`` (user ``standin-unapproved``, read, not approved);
any other token -> 401 ``Invalid credentials in Authorization header``.

Endpoints: ``GET /api/models/{id}[/revision/{rev}]`` (``expand=``/``expand[]=``, ``blobs=True``),
``GET /api/models/{id}/tree/{rev}[/{path}]`` (``recursive=``), ``POST /api/models/{id}/paths-info/{rev}``,
``GET /api/models/{id}/auth-check``, ``GET /api/models/{id}/safetensors-metadata/{index path}``,
``HEAD|GET /{id}/resolve/{rev}/{path}`` (Range -> 206), ``GET /api/whoami-v2``,
``GET|POST /api/models/{id}/discussions``, ``GET /api/models/{id}/discussions/{num}``; test-only
``GET /_standin/discussions`` (every received post: repo, title, description, token, author, num),
``GET /_standin/requests`` (every client request so far, in order: method, path with query, status; what a bench or a
test counts as an answer's Hub requests) and ``POST /_standin/reset`` (forgets both). No Xet headers are ever sent. ``GET /api/models`` lists the model repos
(``search``, ``pipeline_tag``, ``filter``, ``limit``); dataset repos are created, committed to and
read back in memory (``tests/hub_datasets.py``: ``POST /api/repos/create``, ``preupload``, ``commit``
NDJSON with inline files, ``/api/datasets/{id}[/revision|/tree]``, ``/datasets/{id}/resolve``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import threading
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

if __package__ in (None, ""):  # run as a plain script (python tests/hub_server.py): the repo root on the path
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from testkit import hub_repos  # noqa: E402  (after the path fix above)
from tests import hub_datasets, hub_discussions  # noqa: E402

TOKENS: dict[str, dict[str, Any]] = {
    "hf_standin_user": {"name": "standin-user", "role": "write", "approved": True},
    "hf_standin_unapproved": {"name": "standin-unapproved", "role": "read", "approved": False},
}
INVALID_CREDENTIALS = "Invalid credentials in Authorization header"
EXPOSE = (
    "X-Repo-Commit,X-Request-Id,X-Error-Code,X-Error-Message,X-Total-Count,ETag,Link,Accept-Ranges,"
    "Content-Range,X-Linked-Size,X-Linked-ETag"
)
API_SUFFIXES = {"revision", "tree", "discussions", "auth-check", "paths-info", "safetensors-metadata"}


class HubError(Exception):
    """An error response: status, X-Error-Code, message and extra headers."""

    def __init__(self, status: int, message: str, code: str | None = None, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.code, self.headers = status, message, code, headers or {}


class HubState:
    """Everything the handler needs: repos, aliases, discussions (in memory, per server)."""

    def __init__(self) -> None:
        self.repos, self.aliases = hub_repos.load_repos()
        self.discussions = hub_discussions.DiscussionStore()
        self.datasets = hub_datasets.DatasetStore()  # dataset repos pushed by clients (estimate-memory sweep --push-to-hub)
        self.stopping = threading.Event()
        self.requests: list[tuple[str, str, int]] = []  # (method, path with query, status) of every client request, in order
        self.lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    """HTTP handler; routes by path, answers JSON or file bytes."""

    protocol_version = "HTTP/1.1"
    server_version = "HubStandIn/1.0"
    state: HubState  # set on the subclass built by make_server

    # ------------------------------------------------------------------ plumbing
    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        """Record each request (``GET /_standin/requests`` lists them), then log it as the stdlib does."""
        if not self.path.startswith("/_standin/"):
            with self.state.lock:
                self.state.requests.append((self.command, self.path, int(code) if str(code).isdigit() else 0))
        super().log_request(code, size)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        if os.environ.get("HUB_STANDIN_LOG"):
            super().log_message(format, *args)

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_HEAD(self) -> None:
        self._dispatch("HEAD")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def _dispatch(self, method: str) -> None:
        url = urlsplit(self.path)
        self.query = parse_qs(url.query, keep_blank_values=True)
        self.raw_query = url.query
        # Always consume the body so that an early error reply leaves the keep-alive connection clean.
        self.body = self._read_body() if method == "POST" else b""
        try:
            self.user = self._auth()
            self._route(method, url.path)
        except (HubError, hub_datasets.DatasetError) as err:
            headers = {"X-Error-Message": err.message, **getattr(err, "headers", {})}
            if err.code:
                headers["X-Error-Code"] = err.code
            self._send_json(err.status, {"error": err.message}, headers)
        except (BrokenPipeError, ConnectionResetError):
            pass
        except Exception as exc:  # a stand-in bug: answer 500 rather than dropping the connection
            self.log_error("internal error on %s: %r", self.path, exc)
            self._send_json(500, {"error": f"stand-in internal error: {exc!r}"})

    def _auth(self) -> dict[str, Any] | None:
        header = self.headers.get("Authorization", "")
        if not header:
            return None
        token = header[7:].strip() if header.lower().startswith("bearer ") else header.strip()
        if token not in TOKENS:
            raise HubError(401, INVALID_CREDENTIALS)
        return {"token": token, **TOKENS[token]}

    def _common_headers(self) -> None:
        self.send_header("Access-Control-Expose-Headers", EXPOSE)
        trace = self.headers.get("X-Amzn-Trace-Id") or uuid.uuid4().hex
        self.send_header("X-Request-Id", f"Root=1-standin;{trace}")

    def _send_json(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
        body = json.dumps(obj).encode()
        self.send_response(status)
        self._common_headers()
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _redirect(self, location: str) -> None:
        if self.raw_query:
            location += "?" + self.raw_query
        self.send_response(307)
        self._common_headers()
        self.send_header("Location", location)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    # ------------------------------------------------------------------ routing
    def _route(self, method: str, path: str) -> None:
        segs = [unquote(s) for s in path.strip("/").split("/")] if path.strip("/") else []
        if path == "/api/whoami-v2":
            return self._whoami()
        if path == "/_standin/discussions" and method == "GET":
            return self._send_json(200, self.state.discussions.posts())
        if path == "/_standin/requests" and method == "GET":
            with self.state.lock:
                return self._send_json(200, [{"method": m, "path": p, "status": c} for m, p, c in self.state.requests])
        if path == "/_standin/reset" and method == "POST":
            self.state.discussions.reset()
            self.state.datasets.reset()
            with self.state.lock:
                self.state.requests.clear()
            return self._send_json(200, {"ok": True})
        if hub_datasets.route(self, method, segs):  # dataset repos (create, commit, read back) and GET /api/models
            return None
        if len(segs) >= 3 and segs[:2] == ["api", "models"]:
            rest = segs[2:]
            n = 1 if rest[0] in self.state.aliases and (len(rest) == 1 or rest[1] in API_SUFFIXES) else 2
            repo_id, tail = "/".join(rest[:n]), rest[n:]
            if repo_id in self.state.aliases:
                canonical = "/".join(quote(s, safe="") for s in [*self.state.aliases[repo_id].split("/"), *tail])
                return self._redirect(f"/api/models/{canonical}")
            return self._api(method, self._repo(repo_id), tail)
        if "resolve" in segs[1:3] and method in ("GET", "HEAD"):
            i = segs.index("resolve", 1)
            repo_id, tail = "/".join(segs[:i]), segs[i + 1 :]
            if len(tail) < 2:
                raise HubError(404, "Not Found")
            if repo_id in self.state.aliases:
                canonical = self.state.aliases[repo_id]
                return self._redirect("/" + canonical + "/resolve/" + "/".join(quote(s, safe="") for s in tail))
            return self._resolve(self._repo(repo_id), tail[0], "/".join(tail[1:]))
        raise HubError(404, "Not Found")

    def _repo(self, repo_id: str) -> hub_repos.Repo:
        """Look a repo up, applying visibility rules and fault modes."""
        repo = self.state.repos.get(repo_id)
        if repo is None or (repo.private and not (self.user and self.user["approved"])):
            if self.user is None:
                raise HubError(401, "Invalid username or password.", "RepoNotFound")
            raise HubError(404, "Repository not found", "RepoNotFound")
        if repo.fault == "slow":
            if self.state.stopping.wait(float(os.environ.get("HUB_STANDIN_SLOW_SECONDS", "30"))):
                raise HubError(503, "Server shutting down")
        elif repo.fault == "rate-limited":
            reset = os.environ.get("HUB_STANDIN_RATELIMIT_RESET", "0")
            raise HubError(
                429,
                "You have exceeded our hourly quotas for action: api. Retry later.",
                headers={"RateLimit": f'"api";r=0;t={reset}', "RateLimit-Policy": '"fixed window";"api";q=500;w=300'},
            )
        elif repo.fault == "server-error":
            raise HubError(503, "Service Unavailable", headers={"Retry-After": "0"})
        return repo

    def _revision(self, repo: hub_repos.Repo, revision: str) -> str:
        sha = repo.resolve_revision(revision)
        if sha is None:
            raise HubError(404, f"Invalid rev id: {revision}", "RevisionNotFound")
        return sha

    def _check_gate(self, repo: hub_repos.Repo) -> None:
        if not repo.gated or (self.user and self.user["approved"]):
            return
        if self.user is None:
            raise HubError(
                401,
                f"Access to model {repo.id} is restricted. You must have access to it and be authenticated "
                "to access it. Please log in.",
                "GatedRepo",
            )
        raise HubError(
            403,
            f"Access to model {repo.id} is restricted and you are not in the authorized list. "
            f"Visit https://huggingface.co/{repo.id} to ask for access.",
            "GatedRepo",
        )

    # ------------------------------------------------------------------ /api/models/{id}/...
    def _api(self, method: str, repo: hub_repos.Repo, tail: list[str]) -> None:
        if not tail or tail[0] == "revision":
            if method == "POST" or (tail and len(tail) < 2):
                raise HubError(404, "Not Found")
            if tail:
                self._revision(repo, "/".join(tail[1:]))
            expand = self.query.get("expand", []) + self.query.get("expand[]", [])
            blobs = self.query.get("blobs", ["false"])[0].lower() in ("true", "1")
            return self._send_json(200, hub_repos.model_info(repo, expand or None, blobs))
        if tail[0] == "tree" and len(tail) >= 2:
            sha = self._revision(repo, tail[1])
            recursive = self.query.get("recursive", ["false"])[0].lower() in ("true", "1")
            entries = hub_repos.tree(repo, "/".join(tail[2:]), recursive)
            if entries is None:
                raise HubError(404, "Entry not found", "EntryNotFound", {"X-Repo-Commit": sha})
            return self._send_json(200, entries, {"X-Repo-Commit": sha})
        if tail[0] == "paths-info" and len(tail) >= 2 and method == "POST":
            sha = self._revision(repo, "/".join(tail[1:]))
            form = parse_qs(self.body.decode(), keep_blank_values=True)
            entries = hub_repos.paths_info(repo, form.get("paths", []))
            return self._send_json(200, entries, {"X-Repo-Commit": sha})
        if tail[0] == "safetensors-metadata" and len(tail) >= 2:
            self._check_gate(repo)
            doc = hub_repos.sharded_safetensors_metadata(repo, "/".join(tail[1:]))
            if doc is None:
                raise HubError(404, "Entry not found", "EntryNotFound", {"X-Repo-Commit": repo.sha})
            return self._send_json(200, doc)
        if tail == ["auth-check"]:
            self._check_gate(repo)
            return self._send_json(200, {})
        if tail[0] == "discussions":
            return self._discussions(method, repo, tail[1:])
        raise HubError(404, "Not Found")

    def _whoami(self) -> None:
        if self.user is None:
            raise HubError(401, "Invalid user token.")
        self._send_json(
            200,
            {
                "type": "user",
                "id": hub_repos.git_blob_sha1(self.user["name"].encode())[:24],
                "name": self.user["name"],
                "fullname": self.user["name"].replace("-", " ").title(),
                "email": f"{self.user['name']}@example.invalid",
                "emailVerified": True,
                "canPay": False,
                "isPro": False,
                "periodEnd": None,
                "avatarUrl": "/avatars/standin.svg",
                "orgs": [],
                "auth": {
                    "type": "access_token",
                    "accessToken": {
                        "displayName": "standin",
                        "role": self.user["role"],
                        "createdAt": "2024-01-01T00:00:00.000Z",
                    },
                },
            },
        )

    # ------------------------------------------------------------------ discussions
    def _discussions(self, method: str, repo: hub_repos.Repo, tail: list[str]) -> None:
        store = self.state.discussions
        if method == "POST" and not tail:
            if self.user is None:
                raise HubError(401, "You must be authenticated to open a discussion.")
            try:
                body = json.loads(self.body or b"{}")
            except ValueError:
                raise HubError(400, "Invalid JSON body") from None
            title = str(body.get("title", "")).strip()
            if not title:
                raise HubError(400, "title is required")
            num = store.create(
                repo.id, title, str(body.get("description", "")), bool(body.get("pullRequest", False)), self.user
            )
            return self._send_json(200, {"num": num, "url": {"api": f"/api/models/{repo.id}/discussions/{num}"}})
        if method != "GET":
            raise HubError(405, "Method not allowed")
        if not tail:
            page = self.query.get("p", ["0"])[0]
            return self._send_json(200, store.page(repo.id, int(page) if page.isdigit() else 0))
        details = store.details(repo.id, tail[0]) if len(tail) == 1 else None
        if details is None:
            raise HubError(404, "Discussion not found")
        self._send_json(200, details)

    # ------------------------------------------------------------------ /{id}/resolve/{rev}/{path}
    def _resolve(self, repo: hub_repos.Repo, revision: str, path: str) -> None:
        self._check_gate(repo)
        sha = self._revision(repo, revision)
        file = repo.files.get(path)
        if file is None:
            raise HubError(404, "Entry not found", "EntryNotFound", {"X-Repo-Commit": sha})
        start, stop, status = 0, file.size, 200
        rng = self.headers.get("Range")
        if rng:
            m = re.fullmatch(r"\s*bytes=(\d*)-(\d*)\s*", rng)
            if m and (m.group(1) or m.group(2)):
                if m.group(1):
                    start = int(m.group(1))
                    stop = min(file.size, int(m.group(2)) + 1) if m.group(2) else file.size
                else:
                    start = max(0, file.size - int(m.group(2)))
                if start >= file.size or stop <= start:
                    raise HubError(416, "Requested range not satisfiable", headers={"Content-Range": f"bytes */{file.size}"})
                status = 206
        self.send_response(status)
        self._common_headers()
        self.send_header("X-Repo-Commit", sha)
        self.send_header("ETag", f'"{file.etag}"')
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Type", "application/octet-stream" if file.is_lfs else "text/plain; charset=utf-8")
        self.send_header("Content-Disposition", f"inline; filename*=UTF-8''{quote(path.rsplit('/', 1)[-1])}")
        if file.is_lfs:
            self.send_header("X-Linked-Size", str(file.size))
            self.send_header("X-Linked-ETag", f'"{file.etag}"')
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{stop - 1}/{file.size}")
        self.send_header("Content-Length", str(stop - start))
        self.end_headers()
        if self.command == "HEAD":
            return
        for chunk in file.iter_range(start, stop):
            self.wfile.write(chunk)


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up (a timeout test) is normal here; anything else is reported."""
        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            return
        super().handle_error(request, client_address)


def make_server(port: int = 0) -> ThreadingHTTPServer:
    """Build (but do not start) a stand-in server bound to 127.0.0.1:port."""
    handler = type("BoundHandler", (Handler,), {"state": HubState()})
    server = _Server(("127.0.0.1", port), handler)
    server.daemon_threads = True
    return server


def start_server(port: int = 0) -> tuple[str, Callable[[], None]]:
    """Serve in a background thread; return ``(url, stop)``."""
    server = make_server(port)
    thread = threading.Thread(target=server.serve_forever, name="hub-standin", daemon=True)
    thread.start()

    def stop() -> None:
        server.RequestHandlerClass.state.stopping.set()  # type: ignore[attr-defined]
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

    return f"http://127.0.0.1:{server.server_address[1]}", stop


class HubStandIn:
    """Context manager around :func:`start_server`: ``with HubStandIn() as hub: hub.url``."""

    def __init__(self, port: int = 0) -> None:
        self.port = port
        self.url = ""
        self._stop: Callable[[], None] | None = None

    def __enter__(self) -> HubStandIn:
        self.url, self._stop = start_server(self.port)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._stop:
            self._stop()


def main(argv: list[str] | None = None) -> int:
    """CLI entry point: serve until SIGTERM/SIGINT."""
    parser = argparse.ArgumentParser(description="Loopback Hugging Face Hub stand-in")
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0 = pick a free one)")
    args = parser.parse_args(argv)
    server = make_server(args.port)

    def _stop(_signum: int, _frame: object) -> None:
        server.RequestHandlerClass.state.stopping.set()  # type: ignore[attr-defined]
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    print(f"ready http://127.0.0.1:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
