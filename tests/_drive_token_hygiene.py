"""Client-side half of tests/test_token_hygiene.py: use tokens every way a user can give one, then
look for them everywhere they must not be. Run in a subprocess with ``hub_env`` (``HF_ENDPOINT`` is read
at import) and ``TOKEN_SOURCE`` = ``cli`` | ``env`` | ``login`` | ``app``. Prints one JSON object:
``{"places": {name: text}}`` — every log line at DEBUG, CLI output, error message, download, share
link, cache key and posted discussion body, each as text — and ``{"answers": {...}}``, proof that the
token was used (a gated repo answered) so that an absent token is not vacuous.
"""

from __future__ import annotations

import io
import json
import logging
import os
import sys
import urllib.request
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

GOOD = "hf_standin_user"  # the stand-in's approved token (tests/hub_server.py)
MADE_UP = "hf_MadeUpTokenZ9q8w7e6r5t4y3u2i1o0"  # a token nobody accepts: refusals must not repeat it
GATED = "estimator-test/gated-model"
PRIVATE = "estimator-test/private-model"


def _cache_keys() -> str:
    from estimator import api
    from estimator_app import answers, lanes

    keys = [repr(list(api._CACHE._data))]
    keys.append(repr(list(answers._RENDERED._data)))
    for value in vars(lanes).values():
        data = getattr(getattr(value, "_answered", None), "_data", None)
        if data is not None:
            keys.append(repr(list(data)))
    return "\n".join(keys)


def main() -> None:
    source = os.environ["TOKEN_SOURCE"]
    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(f"{record.name} {record.getMessage()}")

    logging.basicConfig(level=logging.DEBUG, handlers=[Keep()], force=True)
    places: dict[str, str] = {}
    answers: dict[str, Any] = {}

    from estimator import estimate
    from estimator.cli import main as cli_main
    from estimator.messages import user_message

    def cli(name: str, argv: list[str]) -> int:
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            status = cli_main([*argv, "--debug"])
        places[f"cli {name}"] = out.getvalue() + err.getvalue()
        logging.basicConfig(level=logging.DEBUG, handlers=[Keep()], force=True)  # the CLI configures logging
        return status

    def api(name: str, model: str, token: str | None, **kwargs: Any) -> str:
        try:
            result = estimate(model, token=token, timeout=5.0, **kwargs)
        except Exception as exc:  # noqa: BLE001 - the message is what is checked
            places[f"error {name}"] = f"{exc!r}\n{exc}\n{user_message(exc)[0]}\n{exc.__cause__!r}"
            return type(exc).__name__
        places[f"result {name}"] = json.dumps(result.to_dict())
        return "answer"

    if source == "cli":
        answers["gated"] = cli("gated", [GATED, "--token", GOOD, "--format", "json"])
        answers["private"] = cli("private", [PRIVATE, "--token", GOOD, "--format", "csv"])
        answers["made-up"] = cli("made-up", [GATED, "--token", MADE_UP])
        answers["made-up training"] = cli("made-up training", [PRIVATE, "--token", MADE_UP, "--mode", "training"])
    elif source in ("env", "login"):
        answers["gated"] = api("gated", GATED, None)
        answers["private"] = api("private", PRIVATE, None, dtypes=["float32"])
        answers["cli gated"] = cli("gated", [GATED, "--format", "markdown"])
    else:  # the app's form: the token field, then posting with a typed token
        import app  # noqa: F401  (the page's module sets the app's environment, as a Space runs it)
        from estimator_app import handlers, tables

        defaults = ("main", "auto", ["float32", "float16"], "load", 1, 0, 0, 0, "cuda", "adamw", False, False, 0, "", "none", "", 0, "f16", "auto", "", 0.9, 0, 0, 0, "auto", 16, 1, 1, "none", "none", 1, 1, "none", "0.19", 0, 0, 0, "auto")
        out = dict(zip(handlers.OUTPUTS, handlers.run_form(GATED, *defaults, GOOD, None, progress=lambda *a, **k: None), strict=True))
        csv_path, json_path, query = out["csv"], out["json"], out["query"]
        places["download csv"] = Path(csv_path).read_text()
        places["download json"] = Path(json_path).read_text()
        places["share link"] = query
        places["post draft"] = out["post_preview"]
        answers["gated"] = "answer"
        last = out["last"]
        for name, token in (("private made-up", MADE_UP), ("private good", GOOD)):
            shown = dict(zip(handlers.OUTPUTS, handlers.run_form(PRIVATE, *defaults, token, last, progress=lambda *a, **k: None), strict=True))
            places[f"app status {name}"] = str(shown["status"])  # the refusal's message, if any, is checked for tokens too
            places[f"app summary {name}"] = str(shown["summary"])
            answers[name] = "refused" if shown["status"] else "answer"
        places["post preview"] = repr(handlers.preview_post(last, query, GOOD))
        places["post result"] = repr(handlers.post_result(last, query, GOOD))
        places["post made-up"] = repr(handlers.post_result(last, query, MADE_UP))
        endpoint = os.environ["HF_ENDPOINT"]
        with urllib.request.urlopen(f"{endpoint}/_standin/discussions", timeout=10) as response:
            posts = json.load(response)
        posts = posts if isinstance(posts, list) else posts.get("discussions", posts)
        answers["posted"] = len(posts)
        places["posted discussions (title, body)"] = json.dumps([[p.get("title"), p.get("description")] for p in posts])
        places["app tables module state"] = repr({k: v for k, v in vars(tables).items() if isinstance(v, (str, dict, list))})
    places["cache keys"] = _cache_keys()
    places["log lines"] = "\n".join(records)
    answers["log line count"] = len(records)
    json.dump({"places": places, "answers": answers}, sys.stdout)


if __name__ == "__main__":
    main()
