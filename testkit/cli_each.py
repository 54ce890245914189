"""Several ``estimate-memory`` answers from one real subprocess: the CLI's ``main()`` on each argv in turn, each
answer's stdout, stderr and exit status kept apart, the imports paid once.

For answers that do not depend on a fresh process (the formats or spellings of one request); what does (a library's
warn-once warnings, a start-up's time, the garbage collector's setting) keeps one process per run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping

from testkit.hub_process import REPO_ROOT

_EACH = ("import contextlib, io, json, sys\nfrom estimator.cli import main\nanswers = []\n"
         "for argv in json.loads(sys.argv[1]):\n"
         "    out, err = io.StringIO(), io.StringIO()\n"
         "    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):\n"
         "        status = main(argv)\n"
         "    answers.append([status, out.getvalue(), err.getvalue()])\n"
         "print(json.dumps(answers))\n")


def run_each(*argvs: tuple[str, ...], env: Mapping[str, str], timeout: float = 300) -> list[subprocess.CompletedProcess[str]]:
    """One ``CompletedProcess`` per argv, as if each had been its own ``python -m estimator`` run (``timeout``: seconds
    for them all)."""
    done = subprocess.run([sys.executable, "-c", _EACH, json.dumps(argvs)], capture_output=True, text=True, cwd=REPO_ROOT,
                          env=dict(env), timeout=timeout)
    assert done.returncode == 0, done.stderr
    return [subprocess.CompletedProcess(list(argv), status, out, err)
            for argv, (status, out, err) in zip(argvs, json.loads(done.stdout.splitlines()[-1]), strict=True)]
