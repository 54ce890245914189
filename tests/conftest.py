"""Shared pytest fixtures: the loopback Hub stand-in (tests/hub_server.py) and client environments."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.hub_process import hub_env, start_hub_process, stop_hub_process


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
