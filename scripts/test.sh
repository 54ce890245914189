#!/usr/bin/env bash
# The project's one test command (the README's, and what .ci/run calls on a clean clone):
# make .venv if it is missing, install the requirements, install Chromium for the browser tests,
# run ruff on the package and the app, then pytest in two workers with mypy beside it (pytest-xdist, one test file per
# worker at a time so module fixtures and truth pools stay whole; `-n 0` after it runs in one process). The files go
# longest first (tests/conftest.py orders them by tests/file_seconds.json; --no-loadscope-reorder keeps that order
# rather than xdist's most-tests-first), so the two workers end together: see testkit/file_order.py.
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -r requirements.txt -r requirements-dev.txt 2>&1 | grep -v "^WARNING: Location" || true
.venv/bin/python -m pip install -q --disable-pip-version-check --no-deps -e . 2>&1 | grep -v "^WARNING: Location" || true
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) || echo "chromium could not be installed; browser tests will fail"
fi
# The repository's own modules compiled once (a second): where PYTHONDONTWRITEBYTECODE is set no process writes them,
# and each of the suite's fresh interpreters would compile what it imports again (reading them is still allowed).
.venv/bin/python -m compileall -q estimator estimator_app estimator_sweep testkit tests bench app.py >/dev/null
# Lint first (seconds): the package and the app must be clean (config in pyproject.toml).
.venv/bin/python -m ruff check estimator estimator_sweep estimator_app app.py
# Types beside the tests rather than before them: a cold mypy (no cache, as on a clean clone) took ~280 s of one core
# here (the typed libraries' sources it reads), time the tests' waits on subprocesses, servers and the browser can
# share. Its report is printed after the tests', and the run fails if either fails.
types_log="$(mktemp)"
.venv/bin/python -m mypy >"$types_log" 2>&1 &
types_pid=$!
tests_rc=0
.venv/bin/python -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder "$@" || tests_rc=$?
types_rc=0
wait "$types_pid" || types_rc=$?
echo "mypy:"
cat "$types_log"
rm -f "$types_log"
[ "$types_rc" -eq 0 ] || { echo "mypy found errors (above)"; exit "$types_rc"; }
exit "$tests_rc"
