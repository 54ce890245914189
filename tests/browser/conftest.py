"""Browser fixtures: the app (``python app.py``) against the Hub stand-in, driven by headless Chromium.

Needs Debian's ``chromium`` (``apt-get install chromium``) and Playwright's Python package
(``pip install playwright``; no ``playwright install``: we pass ``executable_path``). Skipped when
either is missing. ``CHROMIUM`` overrides the browser's path.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testkit.cli_each import run_each
from testkit.hub_process import REPO_ROOT, hub_env

CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
PUBLIC_URL = "https://estimator-test.hf.space/"  # the page's public address in posts (ESTIMATOR_APP_PUBLIC_URL)
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-dev-shm-usage"]
sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright")
if not Path(CHROMIUM).exists():
    pytest.skip("Chromium not installed (apt-get install chromium)", allow_module_level=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_http(url: str, proc: subprocess.Popen[bytes], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"app exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"app did not answer at {url} within {timeout:.0f}s")


@pytest.fixture(scope="session")
def app_env(hub_server: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment the app and the CLI both get: the stand-in as HF_ENDPOINT, no login."""
    return hub_env(hub_server, tmp_path_factory.mktemp("hf_home"))


@pytest.fixture(scope="session")
def app_url(app_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``python app.py`` on a free loopback port, as a person would start it."""
    port = free_port()
    env = {**app_env, "GRADIO_SERVER_PORT": str(port), "GRADIO_SERVER_NAME": "127.0.0.1", "GRADIO_ANALYTICS_ENABLED": "False",
           "ESTIMATOR_APP_PUBLIC_URL": PUBLIC_URL}
    log = tmp_path_factory.mktemp("app") / "app.log"
    with log.open("wb") as handle:
        proc = subprocess.Popen([sys.executable, "app.py"], cwd=REPO_ROOT, env=env, stdout=handle, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}/"
        try:
            wait_http(url, proc)
        except RuntimeError:
            proc.kill()
            raise RuntimeError(log.read_text()[-4000:]) from None
        yield url
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
    text = log.read_text()
    assert "Traceback" not in text, text[-4000:]


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 900}, accept_downloads=True)
    page = context.new_page()
    page.set_default_timeout(90_000)
    yield page
    context.close()


def cli_jsons(env: dict[str, str], questions: dict[str, tuple[str, ...]]) -> dict[str, subprocess.CompletedProcess[str]]:
    """What the command line says to each question (``name: (model, *options)``), ``--format json``, every answer from
    one ``estimate-memory`` subprocess (testkit.cli_each: the imports paid once); read one with :func:`answer_json`."""
    answers = run_each(*[(model, "--format", "json", *options) for model, *options in questions.values()], env=env, timeout=900)
    return dict(zip(questions, answers, strict=True))


def answer_json(answer: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert answer.returncode == 0, answer.stderr
    return dict(json.loads(answer.stdout))


def cli_json(model: str, env: dict[str, str], *args: str) -> dict[str, Any]:
    """What the command line says for ``model`` (the independent path to the same core)."""
    done = subprocess.run(
        [sys.executable, "-m", "estimator", model, "--format", "json", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "browser: runs headless Chromium against the app")
