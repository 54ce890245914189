"""Run ``estimator.estimate`` for a list of cases in one process (tests drive it in a subprocess so
that ``HF_ENDPOINT`` is read at import). Reads ``[{"model": ..., "kwargs": {...}}, ...]`` as JSON on
stdin and prints, per case, ``{"ok": estimate.to_dict()}`` or ``{"error": class name, "message",
"exit"}``, plus the Hub calls the case made, as one JSON list.
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter

from estimator import api, estimate
from estimator.messages import user_message
from estimator.source import hub

CALLS: Counter[str] = Counter()


def _count(name: str) -> None:
    original = getattr(hub, name)

    def wrapper(*args: object, **kwargs: object) -> object:
        CALLS[name] += 1
        return original(*args, **kwargs)

    setattr(hub, name, wrapper)
    if hasattr(api.hub, name):
        setattr(api.hub, name, wrapper)


for _name in ("model_info", "download_json", "safetensors_metadata", "file_sizes"):
    _count(_name)


def main() -> None:
    results = []
    for case in json.load(sys.stdin):
        CALLS.clear()
        started = time.perf_counter()
        try:
            outcome: dict[str, object] = {"ok": estimate(case["model"], **case.get("kwargs", {})).to_dict()}
        except Exception as exc:  # noqa: BLE001 - every failure is reported back to the test
            message, status = user_message(exc)
            outcome = {"error": type(exc).__name__, "message": message, "exit": status}
        outcome["calls"] = dict(CALLS)
        outcome["seconds"] = time.perf_counter() - started
        results.append(outcome)
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
