"""Shared pytest fixtures: the loopback Hub stand-in (tests/hub_server.py), client environments, and the
multimodal truth pool of the accuracy tests (testkit/multimodal_truth.py); test files run longest first
(testkit/file_order.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from testkit.hub_process import hub_env, start_hub_process, stop_hub_process

if TYPE_CHECKING:
    from testkit.multimodal_truth import TruthAndSim


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Test files longest first (``tests/file_seconds.json``), each file's tests in their order: with scripts/test.sh's
    ``-n 2 --dist loadfile --no-loadscope-reorder`` the two workers take the long files first and end together."""
    from testkit.file_order import load_seconds, longest_first

    items[:] = longest_first(items, load_seconds(), lambda item: item.nodeid.split("::")[0])


@pytest.fixture(scope="session")
def hub_server() -> Iterator[str]:
    """URL (``http://127.0.0.1:PORT``) of a Hub stand-in subprocess shared by the whole session."""
    proc, url = start_hub_process()
    yield url
    stop_hub_process(proc)


@pytest.fixture
def hub_client_env(hub_server: str, tmp_path: Path) -> dict[str, str]:
    """``hub_env`` for the session server with a per-test ``HF_HOME`` under ``tmp_path``."""
    return hub_env(hub_server, tmp_path / "hf_home")


@pytest.fixture(scope="module")
def truth_and_sim(request: pytest.FixtureRequest) -> TruthAndSim:
    """The multimodal truth pool of a test module with a ``SAMPLE`` of ``(case, mode, images, audio seconds)``.

    Every row is measured (the allocator's peak of the real run) and simulated, each in a fresh process,
    once per module (``testkit.multimodal_truth.run_jobs``). The returned function gives one row's
    ``(truth, sim)`` results, having checked that both ran and that the step was simulated.
    """
    from testkit.multimodal_truth import run_jobs

    measured = run_jobs([(kind, *case) for case in request.module.SAMPLE for kind in ("truth", "sim")])

    def pair(case: str, mode: str, images: int, seconds: float) -> tuple[dict[str, Any], dict[str, Any]]:
        truth, sim = measured[("truth", case, mode, images, seconds)], measured[("sim", case, mode, images, seconds)]
        assert isinstance(truth, dict), f"ground truth failed: {truth}"
        assert isinstance(sim, dict), f"simulation failed: {sim}"
        assert sim["method"] == "simulated", sim["notes"]
        return truth, sim

    return pair
