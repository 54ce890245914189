"""Ask for models in one process, as the app serves its visitors one after another (tests drive it in a
subprocess so that ``HF_ENDPOINT`` is read at import).

Reads ``[{"via": "core" | "app", "model": ..., "token": ..., "kwargs": {...}}, ...]`` as JSON on stdin.
``core`` calls ``estimator.estimate(model, token=token, **kwargs)``; ``app`` calls the page's handler
``run_form`` with the form's fields (``kwargs`` are :class:`~estimator_app.form.FormState` fields) and
the token field. Prints one JSON object: ``results``, per case ``{"ok": estimate.to_dict()}`` or
``{"error": class name, "message", "exit"}`` (``exit`` is None for a page toast), with the Hub calls
the case made; and ``leaks``, every place a test token was found: a log record of any logger at
DEBUG, a key of the core's or the app's caches, or a file the app wrote.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
from collections import Counter
from typing import Any

os.environ.setdefault("TMPDIR", tempfile.mkdtemp(prefix="drive_access_"))
tempfile.tempdir = None  # the app's downloads go under this process's own TMPDIR

import estimator_app.environment  # noqa: E402,F401  - as app.py: first, before huggingface_hub

# isort: split
from estimator import api, estimate  # noqa: E402
from estimator.messages import user_message  # noqa: E402
from estimator.source import hub  # noqa: E402

TOKENS = ("hf_standin_user", "hf_standin_unapproved")
CALLS: Counter[str] = Counter()
LOG: list[str] = []


class _Keep(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        LOG.append(self.format(record))


def _count(name: str) -> None:
    original = getattr(hub, name)

    def wrapper(*args: object, **kwargs: object) -> object:
        CALLS[name] += 1
        return original(*args, **kwargs)

    setattr(hub, name, wrapper)


for _name in ("model_info", "check_access", "download_json", "safetensors_metadata", "file_sizes"):
    _count(_name)


def _via_core(case: dict[str, Any]) -> dict[str, Any]:
    try:
        return {"ok": estimate(case["model"], token=case.get("token"), **case.get("kwargs", {})).to_dict()}
    except Exception as exc:  # noqa: BLE001 - every failure is reported back to the test
        message, status = user_message(exc)
        return {"error": type(exc).__name__, "message": message, "exit": status}


def _via_app(case: dict[str, Any]) -> dict[str, Any]:
    import html
    import re

    from estimator_app import form, handlers

    fields = form.to_fields(form.FormState(model=case["model"], **{k: tuple(v) if isinstance(v, list) else v for k, v in case.get("kwargs", {}).items()}))
    out = handlers.run_form(*fields, case.get("token") or "", None, progress=lambda *a, **k: None)
    shown = dict(zip(handlers.OUTPUTS, out, strict=True))
    if shown["status"]:  # the page's one message for a refused request
        return {"error": "page", "message": html.unescape(re.sub(r"<[^>]+>", "", shown["status"])), "exit": None}
    return {"ok": shown["last"].to_dict(), "summary": shown["summary"], "files": [shown["csv"], shown["json"]]}


def _leaks() -> list[str]:
    from estimator_app import answers
    from estimator_app.lanes import lanes

    found = []
    places = {
        "log": "\n".join(LOG),
        "core cache keys": repr(list(api._CACHE._data)),
        "app rendered keys": repr(list(answers._RENDERED._data)),
        "app lane keys": repr(list(lanes()._answered._data)),
    }
    if answers.DOWNLOADS.exists():
        for path in answers.DOWNLOADS.rglob("*"):
            places[f"file {path.name}"] = str(path) + (path.read_text(encoding="utf-8") if path.is_file() else "")
    for place, text in places.items():
        found += [f"{token} in {place}" for token in TOKENS if token in text]
    return found


def main() -> None:
    handler = _Keep()
    handler.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
    logging.basicConfig(level=logging.DEBUG, handlers=[handler], force=True)
    results = []
    for case in json.load(sys.stdin):
        CALLS.clear()
        outcome = _via_app(case) if case.get("via") == "app" else _via_core(case)
        outcome["calls"] = dict(CALLS)
        results.append(outcome)
    json.dump({"results": results, "leaks": _leaks(), "log_lines": len(LOG)}, sys.stdout)


if __name__ == "__main__":
    sys.exit(main())
