"""In-memory discussions of the Hub stand-in (stdlib only), shaped as huggingface_hub 2.x parses them.

Every accepted ``POST /api/models/{id}/discussions`` is kept per server with its author and the token used,
so tests can inspect what a client posted (``GET /_standin/discussions``).
"""

from __future__ import annotations

import hashlib
import threading
from datetime import datetime, timezone
from typing import Any

PAGE_SIZE = 50


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def _discussion(repo_id: str, d: dict[str, Any]) -> dict[str, Any]:
    """The list-entry form of a discussion (also the base of the details form)."""
    return {
        "num": d["num"],
        "title": d["title"],
        "status": "draft" if d["isPullRequest"] else "open",
        "isPullRequest": d["isPullRequest"],
        "createdAt": d["createdAt"],
        "author": {"name": d["author"]},
        "repo": {"name": repo_id, "type": "model"},
        "numComments": 1,
        "pinned": False,
    }


class DiscussionStore:
    """Thread-safe per-repo discussion lists plus a log of every received post."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_repo: dict[str, list[dict[str, Any]]] = {}
        self._posts: list[dict[str, Any]] = []

    def reset(self) -> None:
        """Forget everything."""
        with self._lock:
            self._by_repo.clear()
            self._posts.clear()

    def posts(self) -> list[dict[str, Any]]:
        """Every received post: repo, num, title, description, isPullRequest, author, token, createdAt."""
        with self._lock:
            return [dict(p) for p in self._posts]

    def create(self, repo_id: str, title: str, description: str, pull_request: bool, user: dict[str, Any]) -> int:
        """Store a new discussion; return its number (1-based, per repo)."""
        with self._lock:
            items = self._by_repo.setdefault(repo_id, [])
            entry = {
                "num": len(items) + 1,
                "title": title,
                "description": description,
                "isPullRequest": pull_request,
                "author": user["name"],
                "createdAt": _now(),
            }
            items.append(entry)
            self._posts.append({"repo": repo_id, "token": user["token"], **entry})
            return entry["num"]

    def page(self, repo_id: str, page: int) -> dict[str, Any]:
        """``GET .../discussions?p=N``: newest first, ``PAGE_SIZE`` per page."""
        with self._lock:
            items = list(self._by_repo.get(repo_id, []))
        chunk = items[::-1][page * PAGE_SIZE : (page + 1) * PAGE_SIZE]
        return {
            "discussions": [_discussion(repo_id, d) for d in chunk],
            "count": len(items),
            "start": page * PAGE_SIZE,
            "numClosedDiscussions": 0,
        }

    def details(self, repo_id: str, num: str) -> dict[str, Any] | None:
        """``GET .../discussions/{num}`` (what ``DiscussionWithDetails`` needs), or None if unknown."""
        with self._lock:
            found = [d for d in self._by_repo.get(repo_id, []) if str(d["num"]) == num]
        if not found:
            return None
        d = found[0]
        details = _discussion(repo_id, d)
        details["events"] = [
            {
                "id": hashlib.sha1(f"{repo_id}#{d['num']}".encode()).hexdigest()[:24],
                "type": "comment",
                "createdAt": d["createdAt"],
                "author": {"name": d["author"]},
                "data": {"edited": False, "hidden": False, "latest": {"raw": d["description"], "html": d["description"]}},
            }
        ]
        if d["isPullRequest"]:
            details.update({"changes": {"base": "refs/heads/main"}, "filesWithConflicts": [], "diff": ""})
        return details
