"""The fuzz worker process (``python -m tests._fuzz_worker``), driven by :class:`testkit.fuzz_worker.FuzzWorker`.

It lives in ``tests/`` because it serves fuzzed repos from the stand-in's own state
(``tests.hub_server``), which ``testkit`` and ``bench`` may not import; the protocol is described in
``testkit/fuzz_worker.py``.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import resource
import signal
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
FUZZ_ORG = "estimator-fuzz"


class CaseTimeout(BaseException):
    """Raised by SIGALRM inside a case (a BaseException so that no ``except Exception`` swallows it)."""


def _on_alarm(_signum: int, _frame: object) -> None:
    raise CaseTimeout()


def _header_repo(state: Any, n: int, case: dict[str, Any]) -> str:
    import copy
    import hashlib

    from testkit import hub_repos

    base = state.repos["estimator-test/tiny-llama"]
    prefix = base64.b64decode(case["prefix_b64"])
    repo = copy.copy(base)
    repo.id = f"{FUZZ_ORG}/h{n}"
    repo.sha = hashlib.sha1(repo.id.encode() + prefix).hexdigest()
    repo.files = dict(base.files)
    if "config" in case:
        data = json.dumps(case["config"]).encode()
        repo.files["config.json"] = hub_repos.RepoFile(path="config.json", size=len(data), data=data)
    digest = hashlib.sha256(prefix).hexdigest()
    size = max(int(case.get("size", len(prefix))), len(prefix))
    repo.files["model.safetensors"] = hub_repos.RepoFile(path="model.safetensors", size=size, prefix=prefix, sha256=digest)
    repo.param_counts = None  # model_info says nothing about the fuzzed header; the client must read it
    state.repos[repo.id] = repo
    return repo.id


def _run(case: dict[str, Any], state: Any, n: int, workdir: Path) -> tuple[str, str]:
    from estimator import estimate
    from estimator.cli import main as cli_main
    from estimator.errors import EstimatorError

    target = case["target"]
    folder = None
    if target == "config":
        folder = workdir / f"c{n}"
        folder.mkdir()
        (folder / "config.json").write_text(case["config"], encoding="utf-8", errors="surrogatepass")
    if target == "cli" or (target == "config" and case.get("via") == "cli"):
        argv = [a.replace("{dir}", str(folder)) for a in case["argv"]]
        out, err = io.StringIO(), io.StringIO()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                status = cli_main(argv)
        except SystemExit as exc:  # argparse's usage errors
            status = exc.code if isinstance(exc.code, int) else 2
        detail = f"exit {status}: {err.getvalue()[-2000:]}"
        return ("answer" if status == 0 else "refusal" if status in (2, 3) else "crash"), detail
    model = str(folder) if folder is not None else case.get("model", "")
    if target == "header":
        model = _header_repo(state, n, case)
    try:
        result = estimate(model, **case.get("kwargs", {}))
        result.to_dict()  # rendering is part of the answer
        return "answer", f"{len(result.rows)} rows"
    except EstimatorError as exc:
        return "refusal", f"{type(exc).__name__}: {exc}"[:2000]


def main() -> int:
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--case-seconds", type=float, default=60.0)
    args = parser.parse_args()
    os.chdir(REPO_ROOT)
    sys.path.insert(0, str(REPO_ROOT))
    import threading

    from tests.hub_server import make_server  # the public stand-in; its state takes the fuzzed repos

    server = make_server(0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    state = server.RequestHandlerClass.state  # type: ignore[attr-defined]
    workdir = Path(tempfile.mkdtemp(prefix="fuzz_"))
    os.environ.update(
        HF_ENDPOINT=f"http://127.0.0.1:{server.server_address[1]}", HF_HOME=str(workdir / "hf_home"),
        HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_DISABLE_PROGRESS_BARS="1", TRANSFORMERS_VERBOSITY="error",
    )
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE"):
        os.environ.pop(name, None)
    import estimator.cli  # noqa: F401  (import once, before the first case's clock starts)

    signal.signal(signal.SIGALRM, _on_alarm)
    print(json.dumps({"ready": True}), flush=True)
    for n, line in enumerate(sys.stdin):
        case = json.loads(line)
        signal.setitimer(signal.ITIMER_REAL, args.case_seconds)
        try:
            outcome, detail = _run(case, state, n, workdir)
        except CaseTimeout:
            outcome, detail = "crash", f"timeout after {args.case_seconds} s"
        except BaseException:  # noqa: BLE001 - every other ending is the finding
            outcome, detail = "crash", traceback.format_exc()[-4000:]
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(json.dumps({"outcome": outcome, "detail": detail, "maxrss_kib": maxrss}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
