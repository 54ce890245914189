"""The page's handlers called directly (no browser, no server): share-link loading, errors, outputs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import gradio as gr
import pytest

import estimator_app.handlers as app  # the page's handlers; importing them sets no environment variable
from estimator.fit.gpus import GPUS
from estimator.units import format_bytes
from testkit.hub_process import REPO_ROOT
from tests.app_outputs import DEFAULTS, FakeRequest, no_progress, refusal

GPT2 = Path(__file__).resolve().parent / "hub_data" / "models" / "openai-community" / "gpt2"  # copied from the shared hub fixtures
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
    assert fields == ["gpt2", "main", "auto", ["float16", "int4"], "load", 3, 0, 0, 0, "cuda", "adamw", False, False, 0, "", "T4", "", 0, "f16", "auto", "", 0.9, 0, 0, 0, "auto", 16, 1, 1, "none", "none", 1, 1, "none", "0.19", 0, 0, 0, "auto"]
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
    out = app.run_on_load(False, "", *DEFAULTS, "", None, progress=no_progress)
    assert len(out) == app.N_OUTPUTS and all(o == gr.skip() for o in out)


def test_empty_model_is_a_friendly_error() -> None:
    title, message = refusal(app.run_form("  ", *DEFAULTS, "", None, progress=no_progress))
    assert re.search("Type a model id", message), message


def test_an_option_the_core_refuses_shows_the_core_s_message() -> None:
    args = list(DEFAULTS)
    args[3] = "training"
    args[13] = "q_proj"  # LoRA targets without a LoRA rank: the core refuses them before any Hub call
    title, message = refusal(app.run_form("openai-community/gpt2", *args, "", None, progress=no_progress))
    assert re.search("needs “LoRA rank”", message), message
    args[12] = 1 << 17  # a LoRA rank beyond the bound the form shares with the core: the form's own message
    title, message = refusal(app.run_form("openai-community/gpt2", *args, "", None, progress=no_progress))
    assert re.search("LoRA rank must be a whole number from 0 to 65,536", message), message


def test_missing_folder_is_a_friendly_error_not_a_traceback() -> None:
    title, message = refusal(app.run_form("/nonexistent/folder/x", *DEFAULTS, "", None, progress=no_progress))
    assert "Traceback" not in message and "Internal error" not in message


def test_a_local_model_fills_every_output(monkeypatch: pytest.MonkeyPatch) -> None:
    # The page reads the Hub only; the core answers the same request from the local copy of gpt2.
    from estimator import estimate
    from estimator_app import answers

    monkeypatch.setattr(answers, "estimate", lambda ref, **kwargs: estimate(str(GPT2), **kwargs))
    out = dict(zip(app.OUTPUTS, app.run_form("openai-community/gpt2", *DEFAULTS, "", None, progress=no_progress), strict=True))
    last = out["last"]
    assert out["status"] == ""  # no error box
    assert out["result_area"].visible is True
    assert "gpt2" in out["summary"] and "source local" in out["summary"]
    assert "Adam" in out["chart"] and "context" in out["fits"] and "How this is computed" in out["method"]
    assert [r.dtype for r in last.rows] == ["float32", "float16"]
    for row in last.rows:
        assert f'data-bar="{row.dtype} load" data-total="{format_bytes(row.total_bytes)}"' in out["chart"]
        assert f'<th scope="row" data-label="dtype">{row.dtype}</th><td data-label="Total size">{format_bytes(row.total_bytes)}</td>' in out["results"]
    assert Path(out["csv"]).exists() and Path(out["json"]).exists()
    assert "model=" in out["query"] and "dtypes=float32,float16" in out["query"]
    assert out["fits"].count('<th scope="row"') == len(GPUS)
    assert last.rows[0].total_bytes is not None
    assert "Memory needed (load; float32, float16)" in out["post_preview"]  # the post preview follows the new result

    # an error next keeps this result on screen, marked as the last one that worked
    again = dict(zip(app.OUTPUTS, app.run_form("  ", *DEFAULTS, "", last, progress=no_progress), strict=True))
    assert "Type a model id" in refusal(again["status"])[1] and "still the last one that worked" in again["status"]
    assert "Last result that worked" in again["summary"]
    assert all(isinstance(again[name], type(gr.skip())) for name in ("results", "chart", "fits", "last", "query", "post_preview"))
    title, message = refusal(app.post_result(last, "", "hf_x"))
    assert re.search("local folder", message), message


def test_nothing_to_post_before_a_result() -> None:
    title, message = refusal(app.preview_post(None, "", ""))
    assert re.search("Estimate a model first", message), message


def test_counting_gpus_says_what_it_needs_in_the_page_s_words() -> None:
    from estimator.result import Estimate
    from estimator_app import form

    assert "Estimate a model first" in app.count_form(*form.to_fields(form.FormState(model="gpt2")), "", None)
    last = Estimate(model="gpt2", revision=None, library="transformers", architecture=None, source="hub", mode="load", options={}, rows=())
    loading = app.count_form(*form.to_fields(form.FormState(model="gpt2", gpu="T4")), "", last)
    assert "Check the form" in loading and "“Your GPU”" in loading and "run it, fine-tune it or serve it" in loading
    no_gpu = app.count_form(*form.to_fields(form.FormState(model="gpt2", mode="training")), "", last)
    assert "Check the form" in no_gpu and "--" not in no_gpu
    tp_training = app.count_form(*form.to_fields(form.FormState(model="gpt2", mode="training", gpu="T4", tensor_parallel_size=2)), "", last)
    assert "Tensor parallel size applies to running" in tp_training
