"""GGUF verdicts follow llama.cpp's offload plan, and say the same everywhere (issue 32, item 4).

For every GGUF model the Hub stand-in serves (``tests/hub_data/gguf/manifest.json``: the tiny Llama, Gemma-3,
Qwen3-MoE, DeepSeek-2 and the real-shaped Llama-3.1-8B), every quantization, and GPUs on which they fit whole,
in part and not at all, the JSON's ``fit.answer``, the row's offload note, the CLI's fit line, the "fits on"
table's cell (the page renders that table, ``estimator_app.tables.fits_html``) agree; and the verdict is
checked against the split itself: every layer on the GPU when it says "fits", N of M when it says "fits with N
of M layers", and one layer over the capacity for "does not fit".
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from estimator.fit.gpus import find_gpu
from estimator.fit.runtime import CUDA_CONTEXT_BYTES
from testkit.hub_process import REPO_ROOT, hub_env

MANIFEST: dict[str, dict[str, int]] = json.loads((Path(__file__).parent / "hub_data" / "gguf" / "manifest.json").read_text())
BIG = "estimator-test/Meta-Llama-3.1-8B-Instruct-GGUF"
MiB = 1024**2

# In a fresh process (HF_ENDPOINT is read at import): per case the JSON, the table's cells, the page's HTML and
# the CLI's text output, run in that process through estimator.cli.main.
_DRIVER = r"""
import contextlib, io, json, sys
from estimator import estimate
from estimator.cli import main
from estimator.fit.table import fits_frame
from estimator_app.tables import fits_html
out = []
for case in json.load(sys.stdin):
    result = estimate(case["model"], mode="inference", **case["kwargs"])
    gpu = case["kwargs"].get("gpu")
    frame = fits_frame(result, gpu)
    cells = {str(r.dtype): frame.iloc[0][str(r.dtype)] for r in result.rows} if gpu else {}
    html = fits_html(result, frame, "") if gpu else ""
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        flags = [f"--{k.replace('_', '-')}={v}" for k, v in case["kwargs"].items()]
        assert main([case["model"], "--mode", "inference", *flags]) == 0
    out.append({"json": result.to_dict(), "cells": cells, "html": html, "cli": text.getvalue()})
print(json.dumps(out))
"""


def run(url: str, cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    done = subprocess.run([sys.executable, "-c", _DRIVER], input=json.dumps(cases), capture_output=True, text=True, cwd=REPO_ROOT,
                          env=hub_env(url), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def _cases() -> list[dict[str, Any]]:
    cases = []
    for repo in MANIFEST:
        if repo == BIG:  # 8B: partly on a T4 and a 4090 at 128k, whole at 8k, and on no 1 GiB card
            for kwargs in ({"gpu": "T4"}, {"gpu": "RTX 4090"}, {"gpu": "RTX 4090", "ctx": 8192}, {"gpu_memory": "1GiB"},
                           {"gpu": "T4", "n_gpu_layers": 10}, {"gpu": "T4", "n_gpu_layers": "all"}):
                cases.append({"model": repo, "kwargs": {"gguf_file": "Q8_0", **kwargs}})
        else:  # the tiny ones: whole on a T4; on a card a few MiB over the CUDA context, in part or not at all
            cases.append({"model": repo, "kwargs": {"gpu": "T4"}})
            for extra in (1, 3):
                cases.append({"model": repo, "kwargs": {"ctx": 1024, "gpu_memory": f"{CUDA_CONTEXT_BYTES // MiB + extra}MiB"}})
    return cases


@pytest.fixture(scope="module")
def answers(hub_server: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    cases = _cases()
    return list(zip(cases, run(hub_server, cases), strict=True))


def test_table_note_cli_and_json_give_the_same_answer(answers: list[tuple[dict[str, Any], dict[str, Any]]]) -> None:
    verdicts = set()
    for case, got in answers:
        for row in got["json"]["rows"]:
            fit = row["fit"]
            answer = fit["answer"]
            verdicts.add(fit["verdict"])
            assert any(note.endswith("; " + answer) for note in row["notes"]), (case, row["notes"])  # the note
            assert f"{row['dtype']} on {fit['gpu']} " in got["cli"] and answer in got["cli"], (case, got["cli"])  # the CLI
            if "gpu" in case["kwargs"]:  # a named GPU: the table's cell, and the page's rendering of it
                assert got["cells"][row["dtype"]] == answer, case
                from html import escape

                assert escape(answer) in got["html"], case
                style = {"fits": "mme-yes", "fits_partially": "mme-partial", "does_not_fit": "mme-no"}[fit["verdict"]]
                assert f'class="mme-verdict {style}" data-label="{escape(row["dtype"])}">{escape(answer)}<' in got["html"], case
            assert fit["fits"] is (fit["verdict"] != "does_not_fit")
            assert row["offload"] == {k: fit[k] for k in ("n_gpu_layers", "n_offloadable", "gpu_bytes", "cpu_bytes")}
    assert verdicts == {"fits", "fits_partially", "does_not_fit"}  # the cases cover all three


def test_verdict_is_the_split(answers: list[tuple[dict[str, Any], dict[str, Any]]]) -> None:
    """"fits": every layer within the capacity; "fits with N of M": N within (N + 1 over: test_gguf's
    test_gpu_split_is_the_most_layers_that_fit); "does not fit": one layer over."""
    for case, got in answers:
        for row in got["json"]["rows"]:
            fit = row["fit"]
            capacity = fit["capacity_bytes"] - CUDA_CONTEXT_BYTES
            n, m = fit["n_gpu_layers"], fit["n_offloadable"]
            if fit["verdict"] == "fits":
                assert n == m and fit["gpu_bytes"] <= capacity and fit["answer"].startswith("fits (")
            elif fit["verdict"] == "fits_partially":
                assert 0 < n < m and fit["gpu_bytes"] <= capacity
                assert fit["answer"].startswith(f"fits with {n} of {m} layers on the GPU (CPU share ")
            else:  # one layer over, or the -ngl asked over
                assert n == case["kwargs"].get("n_gpu_layers", 1) or (n == m and case["kwargs"].get("n_gpu_layers") == "all")
                assert fit["gpu_bytes"] > capacity and fit["answer"].startswith("does not fit (")


def test_llama_8b_q8_on_a_4090_fits_in_part_and_whole_at_a_smaller_context(answers: list[tuple[dict[str, Any], dict[str, Any]]]) -> None:
    """The issue's case: was "does not fit (1.12 GiB short)" in the table and "32 of 33 ... fits" in the note."""
    by = {(c["model"], tuple(sorted(c["kwargs"].items()))): g for c, g in answers}
    full = by[(BIG, (("gguf_file", "Q8_0"), ("gpu", "RTX 4090")))]["json"]
    fit = full["rows"][0]["fit"]
    assert fit["verdict"] == "fits_partially" and (fit["n_gpu_layers"], fit["n_offloadable"]) == (32, 33) and fit["ctx"] == 131072
    assert "ctx 131,072 (the model's, llama.cpp's default)" in fit["answer"]
    # llama.cpp --fit's offer: the context shrunk (a multiple of 256, at least 4,096) so that every layer fits with its 1 GiB margin
    offered = fit["fit_ctx"]
    assert offered % 256 == 0 and 4096 <= offered < 131072 and f"every layer fits at ctx {offered:,}" in fit["answer"]
    capacity = find_gpu("RTX 4090").total_bytes - CUDA_CONTEXT_BYTES
    at = by[(BIG, (("ctx", 8192), ("gguf_file", "Q8_0"), ("gpu", "RTX 4090")))]["json"]["rows"][0]["fit"]
    assert at["verdict"] == "fits" and at["fit_ctx"] is None  # a context set by the user is kept: no offer
    assert at["gpu_bytes"] <= capacity
    # -ngl set by the user is kept, as --fit keeps it: 10 layers fit a T4 (no change needed, no offer); all 33 do not,
    # and --fit shrinks the context for them
    ten = by[(BIG, (("gguf_file", "Q8_0"), ("gpu", "T4"), ("n_gpu_layers", 10)))]["json"]["rows"][0]["fit"]
    assert ten["verdict"] == "fits_partially" and ten["n_gpu_layers"] == 10 and ten["fit_ctx"] is None
    every = by[(BIG, (("gguf_file", "Q8_0"), ("gpu", "T4"), ("n_gpu_layers", "all")))]["json"]["rows"][0]["fit"]
    assert every["verdict"] == "does_not_fit" and every["n_gpu_layers"] == 33 and 4096 <= every["fit_ctx"] < 131072
    assert f"every layer fits at ctx {every['fit_ctx']:,}" in every["answer"]


def test_llama_fit_interpolates_the_context_as_llama_cpp_does() -> None:
    """``common_params_fit_impl`` step 2 on a plan built from the 8B header: linear between 4,096 and the training context."""
    from estimator.gguf import placement
    from estimator.gguf.header import parse_header
    from estimator.gguf.hparams import hparams
    from estimator.gguf.weights import weights
    from testkit import gguf_models

    name = "Meta-Llama-3.1-8B-Instruct-Q8_0.gguf"
    header, size = gguf_models.headers(BIG)[name]
    h = parse_header(header, size, name)
    assert h is not None
    plan = placement.Plan(hp=hparams(h), w=weights([h]), n_ctx=131072, ctx_source="training", type_k="f16", type_v="f16", flash_attn=True)
    capacity = find_gpu("RTX 4090").total_bytes - CUDA_CONTEXT_BYTES
    target = capacity - placement.FIT_MARGIN
    lo, hi = plan.split(4096, -1).gpu_bytes, plan.split(131072, -1).gpu_bytes
    want = 4096 + (131072 - 4096) * (target - lo) // (hi - lo)
    found = plan.answer(capacity)
    assert found.fit_ctx == want - want % 256
    assert plan.split(found.fit_ctx, -1).gpu_bytes <= target  # our memory model is linear enough in n_ctx that it fits
