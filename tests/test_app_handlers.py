"""The page's handlers called directly (no browser, no server): share-link loading, errors, outputs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import gradio as gr
import pytest

import estimator_app.handlers as app  # the page's handlers; importing them sets no environment variable
from testkit.hub_process import REPO_ROOT

GPT2 = Path(__file__).resolve().parent / "hub_data" / "models" / "openai-community" / "gpt2"  # copied from the shared hub fixtures
DEFAULTS = ("main", "auto", ["float32", "float16"], "load", 1, 0, 0, 0, "cuda", "adamw", False, False, 0, "", "none")


class FakeRequest:
    def __init__(self, query: dict[str, str]) -> None:
        self.query_params = query


def no_progress(*args: Any, **kwargs: Any) -> None:
    return None


def test_app_never_sends_an_implicit_token() -> None:
    """Even with HF_TOKEN set (a Space secret), huggingface_hub in the app sends no token unless passed one."""
    code = "import app, huggingface_hub.constants as c, huggingface_hub.utils as u; print(c.HF_HUB_DISABLE_IMPLICIT_TOKEN, u.get_token_to_send(None))"
    env = {**os.environ, "HF_TOKEN": "hf_server_secret"}
    env.pop("HF_HUB_DISABLE_IMPLICIT_TOKEN", None)
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.split()[-2:] == ["True", "None"]


def test_load_link_fills_the_form_and_asks_to_run() -> None:
    out = app.load_link(FakeRequest({"model": "gpt2", "dtypes": "int4,float16", "batch": "3", "gpu": "T4", "seq": "auto"}))
    *fields, notice, autorun = out
    assert fields == ["gpt2", "main", "auto", ["int4", "float16"], "load", 3, 0, 0, 0, "cuda", "adamw", False, False, 0, "", "T4"]
    assert autorun is True
    assert notice.visible is False


def test_load_link_fills_the_lora_targets_field() -> None:
    *fields, notice, autorun = app.load_link(FakeRequest({"model": "gpt2", "mode": "training", "lora": "8", "lora_targets": "c_attn, c_proj"}))
    assert fields[13:15] == [8, "c_attn,c_proj"] and autorun is True and notice.visible is False
    *fields, notice, _ = app.load_link(FakeRequest({"model": "gpt2", "lora": "8", "lora_targets": "c_attn;c_proj"}))
    assert fields[14] == "" and notice.visible is True and "lora_targets='c_attn;c_proj'" in notice.value


def test_load_link_without_a_model_does_not_run_and_shows_notices() -> None:
    out = app.load_link(FakeRequest({"batch": "x", "what": "1"}))
    assert out[-1] is False
    assert out[-2].visible is True and "batch='x'" in out[-2].value and "'what'" in out[-2].value


def test_run_on_load_without_a_model_changes_nothing() -> None:
    out = app.run_on_load(False, "", *DEFAULTS, "", progress=no_progress)
    assert len(out) == app.N_OUTPUTS and all(o == gr.skip() for o in out)


def test_empty_model_is_a_friendly_error() -> None:
    with pytest.raises(gr.Error, match="Type a model id"):
        app.run_form("  ", *DEFAULTS, "", progress=no_progress)


def test_an_option_the_core_refuses_shows_the_core_s_message() -> None:
    args = list(DEFAULTS)
    args[3] = "training"
    args[13] = "q_proj"  # LoRA targets without a LoRA rank: the core refuses them before any Hub call
    with pytest.raises(gr.Error, match="needs “LoRA rank”"):
        app.run_form("openai-community/gpt2", *args, "", progress=no_progress)
    args[12] = 1 << 17  # a LoRA rank beyond the bound the form shares with the core: the form's own message
    with pytest.raises(gr.Error, match="LoRA rank must be a whole number from 0 to 65,536"):
        app.run_form("openai-community/gpt2", *args, "", progress=no_progress)


def test_missing_folder_is_a_friendly_error_not_a_traceback() -> None:
    with pytest.raises(gr.Error) as caught:
        app.run_form("/nonexistent/folder/x", *DEFAULTS, "", progress=no_progress)
    assert "Traceback" not in str(caught.value) and "Internal error" not in str(caught.value)


def test_a_local_model_fills_every_output(monkeypatch: pytest.MonkeyPatch) -> None:
    # The page reads the Hub only; the core answers the same request from the local copy of gpt2.
    from estimator import estimate
    from estimator_app import answers

    monkeypatch.setattr(answers, "estimate", lambda ref, **kwargs: estimate(str(GPT2), **kwargs))
    out = app.run_form("openai-community/gpt2", *DEFAULTS, "", progress=no_progress)
    area, summary, table, csv_path, json_path, query, chart_title, frame, fits, caption, note, last = out
    assert area.visible is True
    assert "gpt2" in summary and "source local" in summary
    assert "Adam" in chart_title and "512 MiB" in caption and "How this is computed" in note
    assert list(table["dtype"]) == ["float32", "float16"]
    assert Path(csv_path).exists() and Path(json_path).exists()
    assert "model=" in query and "dtypes=float32,float16" in query
    assert set(frame["part"]) >= {"weights"}
    assert len(fits) == 8
    assert last.rows[0].total_bytes is not None
    with pytest.raises(gr.Error, match="local folder"):
        app.post_result(last, "", "hf_x")


def test_nothing_to_post_before_a_result() -> None:
    with pytest.raises(gr.Error, match="Estimate a model first"):
        app.preview_post(None, "", "")
