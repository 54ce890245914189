"""The page's own wording of errors, its admission lanes, and an ``app`` module that builds nothing on import."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import estimator_app.handlers as handlers
from estimator.errors import (
    BadOptionError,
    GatedModelError,
    HubError,
    ModelNotFoundError,
    Option,
    RemoteCodeRequiredError,
    UnsupportedError,
)
from estimator.messages import user_message
from estimator.result import Estimate
from estimator_app import answers, fields, posting
from estimator_app.lanes import Lanes, Settings
from estimator_app.wording import PAGE, for_form, page_option
from testkit.hub_process import REPO_ROOT
from tests.app_outputs import DEFAULTS, no_progress, refusal

GPT2 = Path(__file__).resolve().parent / "hub_data" / "models" / "openai-community" / "gpt2"  # copied from the shared hub fixtures
def test_an_option_is_worded_as_the_form_field_that_sets_it() -> None:
    exc = UnsupportedError([Option("seq_len"), " must be at most 4096."])
    assert exc.message == "--seq-len must be at most 4096."  # the contract's spelling, for the CLI
    page, status = user_message(exc, PAGE)
    assert page == "“Context length” must be at most 4096." and status == 2
    assert "--" not in page


@pytest.mark.parametrize("name", [*fields.OPTIONS, "trust_remote_code", "lora_targets", "timeout", "cross_check"])
def test_no_option_is_worded_as_a_flag_on_the_page(name: str) -> None:
    assert "--" not in page_option(Option(name))


def test_the_page_says_it_never_runs_a_repo_s_code() -> None:
    exc = RemoteCodeRequiredError(["x is defined by code in its repo; the estimator runs it only from the command line with ",
                                   Option("trust_remote_code"), ", after you have read that code."])
    page, _ = user_message(exc, PAGE)
    assert "this page never runs a repo's code" in page and "--" not in page


def test_token_hints_name_the_token_field() -> None:
    gated = GatedModelError(["a/b is gated: pass a token (", Option("token"), ", the HF_TOKEN variable, or `hf auth login`)."])
    assert "(--token, the HF_TOKEN variable" in str(gated)
    page, _ = user_message(gated, PAGE)
    assert "“Hub token” under Advanced" in page and "--" not in page


def test_an_internal_error_asks_for_a_report_with_the_share_link_never_debug() -> None:
    message, status = user_message(RuntimeError("boom"), for_form("model=gpt2&dtypes=float32"))
    assert status == 1 and "share link" in message and "?model=gpt2&dtypes=float32" in message
    assert "--debug" not in message and "--" not in message
    assert "--" not in user_message(KeyError("x"), PAGE)[0]


def test_the_page_shows_the_core_s_errors_in_its_own_words(monkeypatch: pytest.MonkeyPatch) -> None:
    args = list(DEFAULTS)
    args[3], args[13] = "training", "q_proj,v_proj"  # LoRA targets, the LoRA rank left at 0
    title, message = refusal(handlers.run_form("openai-community/gpt2", *args, "", None, progress=no_progress))
    assert message == "“LoRA targets” needs “LoRA rank” (the LoRA rank, e.g. 16)."

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a bug")

    monkeypatch.setattr(answers, "estimate", broken)
    title, message = refusal(handlers.run_form("openai-community/gpt2", *DEFAULTS, "", None, progress=no_progress))
    assert "Internal error (RuntimeError)" in message and "share link" in message
    assert "model=" in message and "--debug" not in message


def test_the_page_passes_lora_targets_to_the_core_and_words_its_refusal(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[dict[str, Any]] = []

    def refusing(ref: Any, **kwargs: Any) -> Any:  # as the core refuses a model peft has no default targets for
        asked.append(kwargs)
        raise BadOptionError(["LoRA could not be applied to a/b: no targets. Name the layers to adapt with ", Option("lora_targets"),
                              " (module names separated by commas; this model's Linear layers: w1, w2)."], option="lora_targets")

    monkeypatch.setattr(answers, "estimate", refusing)
    args = list(DEFAULTS)
    args[3], args[12], args[13] = "training", 16, " q_proj, v_proj "
    title, message = refusal(handlers.run_form("mistralai/Mixtral-8x7B-v0.1", *args, "", None, progress=no_progress))
    assert asked[-1]["lora_rank"] == 16 and asked[-1]["lora_targets"] == "q_proj,v_proj"
    assert "Name the layers to adapt with “LoRA targets” (module names" in message
    assert "command-line" not in message and "--" not in message
    args[13] = ""
    title, message = refusal(handlers.run_form("mistralai/Mixtral-8x7B-v0.1", *args, "", None, progress=no_progress))
    assert asked[-1]["lora_targets"] is None  # empty: peft's default targets


def test_bad_lora_targets_are_refused_by_the_form() -> None:
    args = list(DEFAULTS)
    args[12], args[13] = 8, "q_proj; rm -rf"
    title, message = refusal(handlers.run_form("openai-community/gpt2", *args, "", None, progress=no_progress))
    assert re.search("LoRA targets must be module names", message), message
    assert title == "Check the form"


def test_posting_errors_reach_the_page_in_its_words(monkeypatch: pytest.MonkeyPatch) -> None:
    def raising(exc: Exception) -> Any:
        def find_existing(*args: Any, **kwargs: Any) -> Any:
            raise exc

        return find_existing

    hub_result = Estimate(model="a/b", library="transformers", source="hub", mode="load", rows=())
    missing = ModelNotFoundError(["No model 'a/b' on the Hub; check the spelling. If it is private, pass a token (", Option("token"), ")."])
    monkeypatch.setattr(posting, "find_existing", raising(missing))
    title, message = refusal(handlers.preview_post(hub_result, "", ""))
    assert re.search("No model 'a/b'", message), message
    assert "“Hub token” under Advanced" in message and "--" not in message
    monkeypatch.setattr(posting, "find_existing", raising(HubError("The Hub failed (HTTP 503); try again later.")))
    title, message = refusal(handlers.post_result(hub_result, "", "hf_x"))
    assert re.search("HTTP 503", message), message


def test_a_repeat_skips_the_builder_lane() -> None:
    lanes = Lanes(builders=1)
    admitted: list[str] = []
    assert lanes.run("k", lambda: 1, admitted=lambda: admitted.append("first")) == 1
    held = threading.Event()
    release = threading.Event()

    def hold() -> int:
        held.set()
        release.wait(10)
        return 2

    builder = threading.Thread(target=lanes.run, args=("other", hold))
    builder.start()
    assert held.wait(10)
    assert lanes.run("k", lambda: 3, admitted=lambda: admitted.append("again")) == 3  # the only builder slot is taken
    release.set()
    builder.join(10)
    assert admitted == ["first"]


def test_settings_come_from_the_environment_when_asked() -> None:
    settings = Settings.from_env({"ESTIMATOR_APP_WORKERS": "3", "ESTIMATOR_APP_BUILDERS": "2", "ESTIMATOR_APP_QUEUE_SIZE": "9"})
    assert settings == Settings(workers=3, builders=2, queue_size=9)
    assert Settings.from_env({}).workers == 8 and Settings.from_env({}).builders >= 1


def test_importing_app_builds_nothing_and_demo_is_built_once_on_demand() -> None:
    code = (
        "import app, gradio as gr\n"
        "print(app._demo.cache_info().currsize)\n"
        "demo = app.demo\n"
        "print(isinstance(demo, gr.Blocks), app.demo is demo, app._demo.cache_info().currsize)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "OAUTH_CLIENT_ID"}
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=180, check=True)
    assert done.stdout.split()[-4:] == ["0", "True", "True", "1"], done.stderr[-2000:]
