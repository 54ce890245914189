"""The page as a visitor meets it, in real headless Chromium: one tab through three modes, an error
after a result, phone/tablet/desktop layouts, and axe-core's accessibility rules.

Truth is the command line's JSON for the same request against the same stand-in (an independent
path to the core): the table shows its bytes as ``format_bytes`` does, and the chart's bars and
legend must say the same as the table, every time, in the same tab.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

from estimator.fit.gpus import GPU_NAMES
from estimator.units import format_bytes
from estimator_app.chart import LABELS as PART_LABELS
from testkit.hub_process import REPO_ROOT
from tests.browser.conftest import answer_json, cli_jsons
from tests.browser.test_page import MODEL, model_box, open_advanced, open_app, table_by_dtype, wait_for_result

pytestmark = pytest.mark.browser
TRAINING = "Training with Adam (no activations)"


def chart(page: Any) -> tuple[list[str], dict[str, str], dict[str, dict[str, str]]]:
    """The chart as drawn: legend labels, each bar's total, each bar's parts (label -> value)."""
    legend = page.eval_on_selector_all("#chart .mme-legend li", "els => els.map(e => e.textContent.trim())")
    bars = page.eval_on_selector_all(
        "#chart .mme-bar",
        "els => els.map(e => [e.dataset.bar, e.dataset.total, [...e.querySelectorAll('.mme-seg')].map(s => [s.dataset.part, s.dataset.value])])",
    )
    totals = {bar: total for bar, total, _ in bars}
    parts = {bar: {PART_LABELS[p]: v for p, v in segs} for bar, _, segs in bars}
    return legend, totals, parts


def wait_for_mode(page: Any, mode: str) -> None:
    page.wait_for_function("(m) => { const s = document.querySelector('#summary'); return s && s.innerText.includes('mode ' + m); }", arg=mode)
    wait_for_result(page, MODEL)


def tick_only(page: Any, wanted: list[str]) -> None:
    """Set the dtype boxes by clicking them in ``wanted``'s order (after clearing the others)."""
    for box in page.locator("#dtypes input[type=checkbox]").all():
        if box.is_checked():
            box.click()
    for name in wanted:
        page.locator("#dtypes").get_by_role("checkbox", name=name, exact=True).click()


def test_load_then_training_then_inference_in_one_tab(page: Any, app_url: str, app_env: dict[str, str]) -> None:
    open_app(page, app_url)
    model_box(page).fill(MODEL)
    page.locator("#go").click()
    wait_for_mode(page, "load")
    table = table_by_dtype(page)
    legend, totals, parts = chart(page)
    assert legend == [PART_LABELS["weights"], PART_LABELS["adam_extra"]]
    for dtype, shown in table.items():
        assert totals[f"{dtype} load"] == shown["Total size"]
        if shown[TRAINING] != "—":
            assert totals[f"{dtype} train (Adam)"] == shown[TRAINING]

    # training in the same tab, boxes ticked out of order: rows (and bars) come in the boxes' order
    open_advanced(page)
    page.locator("#mode").get_by_role("radio", name="training").check()
    page.locator("#batch input").fill("2")
    page.locator("#seq input").fill("64")
    tick_only(page, ["bfloat16", "float32"])
    page.locator("#go").click()
    wait_for_mode(page, "training")
    truths = cli_jsons(app_env, {  # the command line's answers to both steps of this visit, from one subprocess
        "training": (MODEL, "--cross-check", "--mode", "training", "--batch-size", "2", "--seq-len", "64", "--dtypes", "float32", "bfloat16"),
        "inference": (MODEL, "--cross-check", "--mode", "inference", "--batch-size", "2", "--seq-len", "64", "--max-new-tokens", "16",
                      "--dtypes", "float32", "bfloat16")})
    check_peaks(page, answer_json(truths["training"]), "training")

    # inference in the same tab: the legend drops what training had (gradients, optimizer states)
    page.locator("#mode").get_by_role("radio", name="inference").check()
    page.locator("#new-tokens input").fill("16")
    page.locator("#go").click()
    wait_for_mode(page, "inference")
    check_peaks(page, answer_json(truths["inference"]), "inference")
    assert TRAINING not in next(iter(table_by_dtype(page).values()))  # no training column in inference
    assert "forward, backward" not in page.locator("#method").inner_text()  # the inference method says what ran


def check_peaks(page: Any, truth: dict[str, Any], mode: str) -> None:
    """Table = the CLI's peaks; every bar's total = its row's peak; the legend = exactly the parts present."""
    table = table_by_dtype(page)
    assert list(table) == [row["dtype"] for row in truth["rows"]] == ["float32", "bfloat16"]
    legend, totals, parts = chart(page)
    present: list[str] = []
    for row in truth["rows"]:
        peak = format_bytes(row["peak_bytes"])
        assert table[row["dtype"]][f"Peak ({mode})"] == peak
        bar = f"{row['dtype']} {mode} peak"
        assert totals[bar] == peak
        assert parts[bar] == {PART_LABELS[k]: format_bytes(v) for k, v in row["components"].items() if v}
        present += [PART_LABELS[k] for k, v in row["components"].items() if v and PART_LABELS[k] not in present]
    assert sorted(legend) == sorted(present)
    assert list(totals) == [f"{d} {mode} peak" for d in ("float32", "bfloat16")]


def test_an_error_after_a_result_keeps_the_result_and_says_so(page: Any, app_url: str) -> None:
    open_app(page, app_url)
    model_box(page).fill(MODEL)
    page.locator("#go").click()
    wait_for_result(page, MODEL)
    before = table_by_dtype(page)
    link = page.locator("#share-link textarea, #share-link input").first.input_value()

    model_box(page).fill("estimator-test/no-such-model")
    page.locator("#go").click()
    page.locator("#status .mme-error").wait_for()
    assert "No model 'estimator-test/no-such-model' on the Hub" in page.locator("#status").inner_text()
    assert "still the last one that worked" in page.locator("#status").inner_text()
    assert "Last result that worked" in page.locator("#summary").inner_text() and MODEL in page.locator("#summary").inner_text()
    assert table_by_dtype(page) == before
    assert page.locator("#chart .mme-bar").count() > 0
    assert page.locator("#share-link textarea, #share-link input").first.input_value() == link
    assert page.locator("#post").is_visible()  # the post section stays, for the result shown
    assert page.locator(".toast-body").count() == 0
    assert page.get_by_text(re.compile(r"^Error$")).count() == 0  # no component turned into an error badge

    # the visitor's own text is shown as typed, never run or dropped
    model_box(page).fill("<script>alert(1)</script>")
    page.locator("#go").click()
    page.wait_for_function("() => document.querySelector('#status')?.innerText.includes('alert(1)')")
    assert "<script>alert(1)</script>" in page.locator("#status").inner_text()

    # the next result clears the message and the mark
    model_box(page).fill(MODEL)
    page.locator("#go").click()
    page.wait_for_function("() => !document.querySelector('#status .mme-error')")
    assert "Last result that worked" not in page.locator("#summary").inner_text()


@pytest.mark.parametrize(("name", "width", "height"), [("desktop", 1280, 900), ("tablet", 768, 1024), ("narrow", 390, 844)])
def test_layouts_show_every_verdict(browser: Any, app_url: str, name: str, width: int, height: int, tmp_path: Path) -> None:
    """At each width every "fits on" verdict is on screen without sideways scrolling, and a table
    wider than the screen shows its cue; ``UPDATE_SCREENSHOTS=1`` writes the screenshots to docs/screenshots/."""
    context = browser.new_context(viewport={"width": width, "height": height}, device_scale_factor=1)
    page = context.new_page()
    page.set_default_timeout(90_000)
    page.goto(app_url + "?model=meta-llama/Llama-3.1-8B&dtypes=float32,bfloat16,float16,int4&gpu=L4")
    wait_for_result(page, "meta-llama/Llama-3.1-8B")
    page.wait_for_timeout(800)
    target = REPO_ROOT / "docs" / "screenshots" if os.environ.get("UPDATE_SCREENSHOTS") else tmp_path
    target.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(target / f"{name}.png"), full_page=True)
    verdicts = page.eval_on_selector_all(
        "#fits td.mme-verdict",
        "els => els.map(e => { const r = e.getBoundingClientRect(); return [e.textContent, r.left, r.right, e.checkVisibility()]; })",
    )
    assert len(verdicts) == len(GPU_NAMES) * 4
    for text, left, right, visible in verdicts:
        assert visible and left >= 0 and right <= width, (text, left, right)
        assert re.search(r"(fits|does not fit) \(", text), text
    scroll_width = page.evaluate("() => document.documentElement.scrollWidth")
    cues = page.eval_on_selector_all(
        ".mme-table",
        "els => els.map(t => { const s = t.querySelector('.mme-scroll');"
        " return [s.scrollWidth > s.clientWidth + 1, t.querySelector('.mme-cue').checkVisibility()]; })",
    )
    context.close()
    assert scroll_width <= width + 1, "the page scrolls sideways"
    assert all(more == cue for more, cue in cues), cues  # a cue exactly where a table is wider than its box


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_accessibility_has_no_serious_or_critical_violation(browser: Any, app_url: str, scheme: str) -> None:
    axe_sync = pytest.importorskip("axe_playwright_python.sync_playwright", reason="pip install axe-playwright-python")
    context = browser.new_context(viewport={"width": 1280, "height": 900}, color_scheme=scheme)
    page = context.new_page()
    page.set_default_timeout(90_000)
    page.goto(app_url + f"?model={MODEL}&dtypes=float32,int4&mode=inference&seq=64")
    wait_for_result(page, MODEL)
    page.locator("#advanced").click()
    page.locator("#post").click()
    page.locator("#chart details summary").click()
    page.wait_for_timeout(800)
    found = axe_sync.Axe().run(page).response["violations"]
    bad = [(v["id"], v["impact"], [n["target"] for n in v["nodes"]][:3]) for v in found if v["impact"] in ("serious", "critical")]
    # the chart: each bar is reached by the keyboard and says its parts
    bars = page.locator("#chart .mme-bar")
    named = bars.first.get_attribute("aria-label") or ""
    tabindex = bars.first.get_attribute("tabindex")
    context.close()
    assert not bad, bad
    assert tabindex == "0" and "in all" in named and "KV cache" in named
