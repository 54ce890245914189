"""The page in real headless Chromium against the app and the Hub stand-in on loopback."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

from estimator.fit.gpus import GPU_NAMES
from estimator.units import format_bytes
from testkit.hub_process import REPO_ROOT
from tests.browser.conftest import answer_json, cli_jsons

pytestmark = pytest.mark.browser
MODEL = "openai-community/gpt2"
GGUF = "estimator-test/gguf-only"
QUESTIONS = {  # what each test asks the command line, the independent path to the page's figures
    "typed": (MODEL, "--cross-check", "--dtypes", "float32", "bfloat16", "int8", "int4"),  # the app always cross-checks
    "bert": ("google-bert/bert-base-cased", "--dtypes", "bfloat16", "float32", "--cross-check"),
    "inference": (MODEL, "--dtypes", "float32", "--mode", "inference", "--batch-size", "2", "--seq-len", "128", "--max-new-tokens", "32",
                  "--device", "cpu"),
    "serving": (MODEL, "--mode", "serving", "--dtypes", "float16", "bfloat16", "--gpu", "L4", "--gpu-memory-utilization", "0.8",
                "--max-model-len", "1024", "--max-num-seqs", "64"),
    "zero2": (MODEL, "--mode", "training", "--dtypes", "float32", "--batch-size", "1", "--seq-len", "128", "--gpus", "4",
              "--strategy", "zero2", "--offload", "optimizer"),
    "gguf": (GGUF, "--mode", "inference", "--ctx", "4096", "--cache-type", "q8_0", "--gguf-file", "Q8_0"),
}


@pytest.fixture(scope="module")
def cli(app_env: dict[str, str]) -> dict[str, Any]:
    """The command line's answers to ``QUESTIONS``, from one subprocess."""
    return cli_jsons(app_env, QUESTIONS)


def grid_rows(page: Any, elem_id: str) -> list[list[str]]:
    """The rows of the page's table in ``#elem_id``, header first, as cell texts (as a screen reader reads them)."""
    return page.eval_on_selector(
        f"#{elem_id} table",
        "t => [...t.querySelectorAll('tr')].map(r => [...r.querySelectorAll('th, td')].map(c => c.textContent.trim()))",
    )


def wait_for_result(page: Any, model: str) -> None:
    page.wait_for_function(
        "(m) => { const s = document.querySelector('#summary'); return s && s.innerText.includes(m) && s.innerText.includes('source'); }",
        arg=model,
    )
    page.wait_for_function(
        "() => { const l = document.querySelector('#share-link textarea, #share-link input'); return l && l.value.includes('model='); }"
    )
    page.wait_for_function(
        "() => { const g = document.querySelector('#results table');"
        " return g && g.textContent.includes('Total size') && g.textContent.includes('B'); }"
    )
    page.wait_for_function("() => { const g = document.querySelector('#fits'); return g && (g.textContent.includes('H200') || g.textContent.includes('cpu')); }")


def table_by_dtype(page: Any) -> dict[str, dict[str, str]]:
    header, *body = grid_rows(page, "results")
    return {cells[0]: dict(zip(header, cells, strict=True)) for cells in body}


def open_app(page: Any, url: str) -> None:
    """Open the page and wait until Gradio has mounted and run its load event."""
    page.goto(url)
    page.locator("#go").wait_for()
    page.wait_for_timeout(1000)  # the load event (share-link parsing) runs right after mounting


def open_advanced(page: Any) -> None:
    """Open the Advanced accordion and wait until Gradio has mounted its fields (the last one, the token,
    is visible): a value typed into a field that is still mounting is lost when the field finishes."""
    page.locator("#advanced").click()
    page.locator("#token input, #token textarea").first.wait_for(state="visible")
    page.wait_for_timeout(2000)  # and the values a share link gave them, applied when they mount


def model_box(page: Any) -> Any:
    return page.locator("#model textarea, #model input").first


def test_type_a_model_and_see_the_cli_s_bytes(page: Any, app_url: str, cli: dict[str, Any]) -> None:
    open_app(page, app_url)
    model_box(page).fill(MODEL)
    page.locator("#go").click()
    wait_for_result(page, MODEL)
    truth = answer_json(cli["typed"])
    table = table_by_dtype(page)
    assert list(table) == [row["dtype"] for row in truth["rows"]] == ["float32", "bfloat16", "int8", "int4"]  # the page's defaults
    for row in truth["rows"]:
        shown = table[row["dtype"]]
        assert shown["Total size"] == format_bytes(row["total_bytes"])
        assert shown["Largest layer"] == format_bytes(row["largest_layer_bytes"])
    # the exact bytes: the JSON download is the CLI's JSON
    with page.expect_download() as download:
        page.locator("#json").click()
    data = json.loads(Path(download.value.path()).read_text())
    assert [r["total_bytes"] for r in data["rows"]] == [r["total_bytes"] for r in truth["rows"]]
    assert data["rows"][0]["total_bytes"] == 124_439_808 * 4  # GPT-2 small: its 124,439,808 parameters in fp32, no stored masks
    # the fits-on table answers for every GPU; the chart and the method note are there
    fits = grid_rows(page, "fits")
    assert [cells[0] for cells in fits[1:]] == list(GPU_NAMES)
    assert all(cell.startswith("fits") for cells in fits[1:] for cell in cells[3:5])
    assert "How this is computed" in page.locator("#method").inner_text()
    assert page.locator("#chart .mme-bar").count() == 6  # a load and a train bar per row that can be trained


def test_share_link_fills_the_form_and_runs_with_no_click(page: Any, app_url: str, cli: dict[str, Any]) -> None:
    query = (
        "model=google-bert/bert-base-cased&revision=main&library=auto&dtypes=bfloat16,float32&mode=load&batch=1&seq=auto"
        "&image=auto&new_tokens=0&device=cuda&optimizer=adamw&pure16=0&checkpointing=0&lora=none&gpu=T4"
    )
    page.goto(app_url + "?" + query)
    wait_for_result(page, "google-bert/bert-base-cased")
    assert model_box(page).input_value() == "google-bert/bert-base-cased"
    truth = answer_json(cli["bert"])
    table = table_by_dtype(page)
    assert list(table) == ["float32", "bfloat16"]  # the checkboxes' order, whatever order the link gave
    for row in truth["rows"]:
        assert table[row["dtype"]]["Total size"] == format_bytes(row["total_bytes"])
    assert grid_rows(page, "fits")[1][0] == "T4 (selected)"
    assert not page.locator("#notices").is_visible()
    # the link it shows reproduces the result: same parameters, commit pinned
    link = page.locator("#share-link textarea, #share-link input").first.input_value()
    shown = dict(parse_qsl(urlsplit(link).query))
    asked = dict(parse_qsl(query))
    asked["dtypes"] = "float32,bfloat16"  # spelled in the page's one order
    asked.update({k: v for k, v in shown.items() if k not in asked})  # parameters the link left out: spelled out at their defaults
    assert {k: shown[k] for k in ("gpu_memory", "ctx", "cache_type", "n_gpu_layers")} == {"gpu_memory": "none", "ctx": "auto", "cache_type": "f16", "n_gpu_layers": "auto"}
    assert {k: v for k, v in shown.items() if k != "revision"} == {k: v for k, v in asked.items() if k != "revision"}
    assert len(shown["revision"]) == 40
    assert page.url == link  # the address bar follows the result
    assert page.locator("#share-link button").count() >= 1  # the copy control


def test_malformed_link_shows_its_notice_and_still_answers(page: Any, app_url: str) -> None:
    page.goto(app_url + f"?model={MODEL}&batch=-2&dtypes=float16,fp99&frobnicate=1")
    wait_for_result(page, MODEL)
    notice = page.locator("#notices").inner_text()
    assert "batch='-2'" in notice and "'fp99'" in notice and "'frobnicate'" in notice
    assert list(table_by_dtype(page)) == ["float16"]


def test_missing_repo_shows_a_friendly_error(page: Any, app_url: str) -> None:
    open_app(page, app_url)
    model_box(page).fill("estimator-test/no-such-model")
    page.locator("#go").click()
    status = page.locator("#status .mme-error")
    status.wait_for()
    text = status.inner_text()
    assert "No model 'estimator-test/no-such-model' on the Hub" in text
    assert "“Hub token” under Advanced" in text and "HF_TOKEN" not in text and "--token" not in text
    assert page.locator(".toast-body").count() == 0  # one message, in the page, covering no field
    assert "Traceback" not in page.content()


def test_inference_link_shows_the_simulated_peak(page: Any, app_url: str, cli: dict[str, Any]) -> None:
    page.goto(app_url + f"?model={MODEL}&dtypes=float32&mode=inference&batch=2&seq=128&new_tokens=32&device=cpu")
    wait_for_result(page, MODEL)
    truth = answer_json(cli["inference"])
    shown = table_by_dtype(page)["float32"]
    assert shown["Peak (inference)"] == format_bytes(truth["rows"][0]["peak_bytes"])
    page.locator("#advanced").click()
    with contextlib.suppress(PlaywrightTimeoutError):  # the accordion renders its content a moment after the click
        page.wait_for_function("() => document.querySelector('#advanced')?.innerText.includes('inference')", timeout=10_000)
    assert page.locator("#advanced").inner_text().count("inference") >= 1


def test_one_click_on_an_example_gives_an_answer(page: Any, app_url: str) -> None:
    open_app(page, app_url)
    page.get_by_role("button", name="google-bert/bert-base-cased").click()
    wait_for_result(page, "google-bert/bert-base-cased")
    assert "float32" in table_by_dtype(page)


@pytest.mark.parametrize(("name", "width", "height"), [("training-desktop", 1280, 900), ("training-narrow", 390, 844)])
def test_training_options_from_a_share_link(browser: Any, app_url: str, name: str, width: int, height: int, tmp_path: Path) -> None:
    """A LoRA + checkpointing link fills the Advanced fields (the LoRA targets too), answers with a
    simulated peak, and the page fits the width; ``UPDATE_SCREENSHOTS=1`` keeps the screenshots."""
    context = browser.new_context(viewport={"width": width, "height": height}, device_scale_factor=1)
    page = context.new_page()
    page.set_default_timeout(120_000)
    page.goto(app_url + "?model=meta-llama/Llama-3.1-8B&mode=training&dtypes=bfloat16&seq=256&checkpointing=1"
              "&lora=16&lora_targets=q_proj,v_proj&device=cuda")
    wait_for_result(page, "meta-llama/Llama-3.1-8B")
    # fine-tuning's own questions are on the first screen, filled from the link (Advanced still closed)
    assert page.locator("#lora input").first.input_value() == "16" and page.locator("#checkpointing input").first.is_checked()
    assert page.locator("#setting").inner_text() == "Fine-tune, LoRA r16, adamw, gradient checkpointing · bfloat16 · batch 1 × 256 tokens · no GPU chosen"
    page.locator("#advanced").click()
    page.wait_for_timeout(1500)
    assert page.locator("#lora-targets textarea, #lora-targets input").first.input_value() == "q_proj,v_proj"
    assert "LoRA r=16 on q_proj, v_proj" in page.content()
    target = REPO_ROOT / "docs" / "screenshots" if os.environ.get("UPDATE_SCREENSHOTS") else tmp_path
    target.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(target / f"{name}.png"), full_page=True)
    scroll_width = page.evaluate("() => document.documentElement.scrollWidth")
    context.close()
    assert scroll_width <= width + 1, "the page scrolls sideways"


def test_serving_view_from_a_share_link(page: Any, app_url: str, cli: dict[str, Any]) -> None:
    """Mode serving: the vLLM plan per dtype, each line equal to the CLI's ``serving`` figures, on a desktop and a phone."""
    query = (f"model={MODEL}&dtypes=float16,bfloat16&mode=serving&gpu=L4&gpu_memory_utilization=0.8&max_model_len=1024"
             "&max_num_seqs=64&kv_cache_dtype=auto&block_size=16")
    page.goto(app_url + "?" + query)
    try:
        page.wait_for_function("() => { const g = document.querySelector('#fits table'); return g && g.textContent.includes('KV blocks'); }",
                               timeout=120_000)
    except PlaywrightTimeoutError:
        raise AssertionError("no serving plan on the page: " + page.locator("#status").inner_text()[:300]
                             + " | " + page.locator("#summary").inner_text()[:300] + " | " + page.locator("#notices").inner_text()[:300]) from None
    truth = answer_json(cli["serving"])
    header, *lines = grid_rows(page, "fits")
    assert header == ["vLLM budget", "float16", "bfloat16"]
    plan = {cells[0]: dict(zip(header[1:], cells[1:], strict=True)) for cells in lines}
    for row in truth["rows"]:
        serving = row["serving"]
        shown = {label: plan[label][row["dtype"]] for label in plan}
        assert shown["= KV cache"] == format_bytes(serving["kv_cache_bytes"])
        assert shown["- weights"] == format_bytes(serving["weights_bytes"])
        assert shown["KV blocks"] == f"{serving['num_blocks']:,}"
        assert shown["Tokens of KV cache"] == f"{serving['kv_cache_tokens']:,}"
        assert shown["Requests of max model length at once"] == f"{serving['max_concurrency']:,.2f}"
        assert shown["One max-length request fits (vLLM starts)"] == ("yes" if serving["fits"] else "no")
    link = page.locator("#share-link textarea, #share-link input").first.input_value()
    shown_query = dict(parse_qsl(urlsplit(link).query))
    assert shown_query["mode"] == "serving" and shown_query["gpu_memory_utilization"] == "0.8" and shown_query["max_num_seqs"] == "64"
    for width, height, name in ((1280, 900, "serving-desktop"), (390, 844, "serving-narrow")):
        page.set_viewport_size({"width": width, "height": height})
        page.wait_for_timeout(300)
        assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth + 1")  # no sideways scrolling of the page
        if os.environ.get("UPDATE_SCREENSHOTS"):
            page.locator("#result-area").screenshot(path=str(REPO_ROOT / "docs" / "screenshots" / f"{name}.png"))


def test_several_gpus_from_a_share_link(page: Any, app_url: str, cli: dict[str, Any]) -> None:
    """ZeRO-2 over 4 GPUs: the page's per-GPU peak is the CLI's, and the link carries the strategy."""
    page.goto(app_url + f"?model={MODEL}&dtypes=float32&mode=training&batch=1&seq=128&gpus=4&strategy=zero2&offload=optimizer")
    page.wait_for_function("() => { const g = document.querySelector('#results table'); return g && g.textContent.includes('per GPU'); }",
                           timeout=300_000)
    truth = answer_json(cli["zero2"])
    row = table_by_dtype(page)["float32"]
    assert row["Peak (training, per GPU (× 4), zero2)"] == format_bytes(truth["rows"][0]["peak_bytes"])
    assert row["CPU memory per node (offload)"] == format_bytes(truth["rows"][0]["cpu_bytes"])
    link = page.locator("#share-link textarea, #share-link input").first.input_value()
    shown = dict(parse_qsl(urlsplit(link).query))
    assert (shown["gpus"], shown["nodes"], shown["strategy"], shown["offload"]) == ("4", "1", "zero2", "optimizer")


def test_gguf_inference_from_a_share_link(page: Any, app_url: str, cli: dict[str, Any]) -> None:
    """A GGUF-only repo in inference: the page's figures are the CLI's (llama.cpp's context, cache type and
    file from the link), and the link it shows carries them back."""
    page.goto(app_url + f"?model={GGUF}&mode=inference&ctx=4096&cache_type=q8_0&gguf_file=Q8_0")
    try:
        page.wait_for_function("() => { const g = document.querySelector('#results table'); return g && g.textContent.includes('Q8_0'); }",
                               timeout=120_000)
    except PlaywrightTimeoutError:
        raise AssertionError("no GGUF answer on the page: " + page.locator("#status").inner_text()[:300]
                             + " | " + page.locator("#summary").inner_text()[:300]) from None
    truth = answer_json(cli["gguf"])
    (row,) = truth["rows"]
    shown = table_by_dtype(page)
    assert list(shown) == [row["dtype"]] == ["Q8_0"]
    cells = shown["Q8_0"]
    peak = next(v for k, v in cells.items() if k.startswith("Peak"))
    assert peak == format_bytes(row["peak_bytes"])
    assert cells["Total size"] == format_bytes(row["total_bytes"])
    assert row["components"]["kv_cache"] > 0 and "KV cache" in page.locator("#chart").inner_text()
    link = page.locator("#share-link textarea, #share-link input").first.input_value()
    query = dict(parse_qsl(urlsplit(link).query))
    assert (query["mode"], query["ctx"], query["cache_type"], query["gguf_file"]) == ("inference", "4096", "q8_0", "Q8_0")
