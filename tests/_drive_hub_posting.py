"""Client-side half of tests/test_hub_posting.py: the app's posting and the Hub calls, through the REAL client.

Run in a subprocess whose environment comes from ``hub_env`` (HF_ENDPOINT is read at import). Prints
one JSON object ``{case: outcome}``: ``{"ok": value}`` or ``{"error": class, "message", "status",
"exit", "seconds"}``, and what huggingface_hub's shared HTTP client looks like after an estimate.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

USER = "hf_standin_user"
REPO = "google-bert/bert-base-cased"


def outcome(fn: Callable[[], Any]) -> dict[str, Any]:
    started = time.perf_counter()
    try:
        return {"ok": fn(), "seconds": time.perf_counter() - started}
    except Exception as exc:  # noqa: BLE001 - the exception IS the result
        from estimator.messages import user_message

        message, status = user_message(exc)
        return {"error": type(exc).__name__, "message": message, "exit": status, "status": getattr(exc, "status", None),
                "seconds": time.perf_counter() - started}


def main() -> None:
    import huggingface_hub
    from huggingface_hub.utils import _http  # read only: the test checks that nothing replaced its client factory

    from estimator import estimate
    from estimator.source import hub
    from estimator_app import posting

    factory = _http._GLOBAL_CLIENT_FACTORY
    results: dict[str, Any] = {}
    results["estimate"] = outcome(lambda: estimate("openai-community/gpt2", dtypes=["float32"], timeout=3.0).rows[0].total_bytes)
    results["estimate_slow"] = outcome(lambda: estimate("estimator-test/slow", timeout=1.0))
    results["client"] = {
        "factory_untouched": _http._GLOBAL_CLIENT_FACTORY is factory is _http.default_client_factory,
        "session_timeout": repr(huggingface_hub.get_session().timeout),
    }

    def link(found: hub.DiscussionLink | None) -> list[Any] | None:
        return None if found is None else [found.num, found.url]

    results["find_none"] = outcome(lambda: link(hub.find_discussion(REPO, "no such title", token=None)))
    results["open"] = outcome(lambda: link(hub.open_discussion(REPO, "A title", "A body", token=USER)))
    results["find_it"] = outcome(lambda: link(hub.find_discussion(REPO, "A title", token=None)))
    results["open_bad_token"] = outcome(lambda: link(hub.open_discussion(REPO, "t", "b", token="hf_bogus")))
    results["open_no_token"] = outcome(lambda: link(hub.open_discussion(REPO, "t", "b", token="")))
    results["open_missing_repo"] = outcome(lambda: link(hub.open_discussion("nobody/no-such-model", "t", "b", token=USER)))
    results["find_rate_limited"] = outcome(lambda: link(hub.find_discussion("estimator-test/rate-limited", "t", token=None)))
    results["find_server_error"] = outcome(lambda: link(hub.find_discussion("estimator-test/server-error", "t", token=None)))
    results["find_slow"] = outcome(lambda: link(hub.find_discussion("estimator-test/slow", "t", token=None, timeout=1.0)))
    results["open_slow"] = outcome(lambda: link(hub.open_discussion("estimator-test/slow", "t", "b", token=USER, timeout=1.0)))

    from estimator.result import Estimate, Row

    row = Row(dtype="float32", total_bytes=4, largest_layer_bytes=4, training_adam_bytes=16, method="exact")
    result = Estimate(model=REPO, library="transformers", source="hub", mode="load", rows=(row,))
    results["publish"] = outcome(lambda: posting.publish(result, "https://x/?model=bert", USER))
    results["publish_again"] = outcome(lambda: posting.publish(result, "https://x/?model=bert", USER))
    results["preview"] = outcome(lambda: posting.preview(result, "https://x/?model=bert", None)[1])
    results["publish_anonymous"] = outcome(lambda: posting.publish(
        Estimate(model="FacebookAI/roberta-base", library="transformers", source="hub", mode="load", rows=result.rows), "", None))
    print(json.dumps(results))


if __name__ == "__main__":
    main()
