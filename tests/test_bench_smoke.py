"""Every ``bench/`` script runs in its ``--smoke`` mode (tiny inputs, seconds) and succeeds, so none can rot unseen.

Each script's ``main(["--smoke"])`` runs in this process (the imports of torch and transformers are paid
once for all of them); the page's benches (load test, soak) share one app started here with
``bench.load_test.start_stack`` against the Hub stand-in. A new script is picked up by its file name;
``bench/_*.py`` are helpers, not benches. A smoke run writes none of the bench's files under ``bench/results/``.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p.stem for p in (ROOT / "bench").glob("*.py") if not p.stem.startswith("_"))
PAGE_BENCHES = ("load_test", "soak")  # they talk to a running app: given one with --url


@pytest.fixture(scope="module")
def app_stack() -> Iterator[tuple[str, int]]:
    from bench.load_test import start_stack, stop_stack

    url, pid, procs = start_stack()
    try:
        yield url, pid
    finally:
        stop_stack(procs)


WRITES = {"fsdp_truth_grid": "fsdp_truth", "load_test": "load"}  # benches whose results are not named after them


def _results(name: str) -> dict[str, int]:
    """The bench's own result files (named after it) and their modification times."""
    prefix = WRITES.get(name, name)
    return {str(p): p.stat().st_mtime_ns for p in (ROOT / "bench" / "results").rglob(f"{prefix}*") if p.is_file()}


def test_the_benches_are_found() -> None:
    assert {"load_test", "soak", "whatfits_speed", "peak_accuracy"} <= set(SCRIPTS)


@pytest.mark.parametrize("name", SCRIPTS)
def test_smoke_mode(name: str, request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]) -> None:
    module = importlib.import_module(f"bench.{name}")
    argv = ["--smoke"]
    if name in PAGE_BENCHES:
        url, pid = request.getfixturevalue("app_stack")
        argv += ["--url", url, "--pid", str(pid)]
    before = _results(name)
    status = module.main(argv)
    out = capsys.readouterr().out
    assert status == 0, out[-3000:]
    assert out.strip(), "a smoke run says what it measured"
    assert _results(name) == before, "a smoke run writes nothing under bench/results/"
