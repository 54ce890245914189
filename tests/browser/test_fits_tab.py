"""The "What fits my GPU?" tab in real headless Chromium: the dataset shipped with the app, at 1280 and 390 px.

What the page's table shows is compared, row by row, with :func:`estimator_app.whatfits.answer`
on the same dataset; a model's link opens its full answer on the first tab.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pandas as pd
import pytest

from estimator_app import whatfits
from testkit.hub_process import REPO_ROOT

pytestmark = pytest.mark.browser


def grid_rows(page: Any) -> tuple[list[str], list[list[str]]]:
    """The fits table's header cells and its rows' cells (Gradio 6 renders rows as ``[role=row]`` of ``[role=gridcell]``)."""
    return page.eval_on_selector(
        "#fits-table [role=grid]",
        "t => [[...t.querySelectorAll('thead th')].map(c => c.textContent.trim()),"
        " [...t.querySelectorAll('[role=row][data-index]')].map(r => [...r.querySelectorAll('[role=gridcell]')].map(c => c.textContent.trim()))]",
    )


def expected(query: whatfits.Query) -> whatfits.Answer:
    sweep = whatfits.load(str(whatfits.SHIPPED))
    return whatfits.answer(sweep, query)


def shown_models(page: Any) -> list[str]:
    """The models the table shows, in order: the links of its Model column."""
    return page.eval_on_selector(
        "#fits-table [role=grid]",
        "g => [...g.querySelectorAll('[role=gridcell][data-col=\"0\"]')].sort((a, b) => a.dataset.row - b.dataset.row)"
        ".map(c => c.textContent.trim())",
    )


def wait_for_table(page: Any, first_model: str) -> None:
    page.wait_for_function("(m) => { const g = document.querySelector('#fits-table [role=grid]'); return g && g.textContent.includes(m); }",
                           arg=first_model, timeout=60_000)


def test_pick_a_gpu_and_use_then_open_a_model_s_full_answer(browser: Any, app_url: str) -> None:
    query = whatfits.Query(gpu="RTX 4090", use="load", dtype="bfloat16")
    truth = expected(query)
    assert truth.fitting > 0
    names = [cell.split("]")[0][1:] for cell in truth.table["Model"]]
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(90_000)
    page.goto(app_url)
    page.get_by_role("tab", name="What fits my GPU?").click()
    page.locator("#fits-go").click()
    wait_for_table(page, names[0])
    assert shown_models(page) == names
    assert truth.summary in page.locator("#fits-status").inner_text()
    page.wait_for_function("() => window.location.search.includes('fits_gpu=')")
    shared = dict(parse_qsl(urlsplit(page.url).query, keep_blank_values=True))
    assert whatfits.from_params(shared) == whatfits.Query(gpu="RTX 4090", memory=None, use="load", dtype="bfloat16",
                                                          scenario="the weights", filter="")
    if len(names) > 1:  # the table's own filter box narrows the rows shown
        page.locator("#fits-table input[placeholder='Filter...']").fill(names[-1])
        page.wait_for_function("(n) => document.querySelectorAll('#fits-table [role=gridcell][data-col=\"0\"]').length === n",
                               arg=sum(names[-1] in name for name in names))
        assert all(names[-1] in name for name in shown_models(page))
        page.locator("#fits-table input[placeholder='Filter...']").fill("")
    with context.expect_page() as opened:  # Gradio opens a table's links in a new tab
        page.locator("#fits-table [role=gridcell] a", has_text=names[0]).first.click()
    answer = opened.value
    answer.wait_for_function("(m) => { const s = document.querySelector('#summary'); return s && s.innerText.includes(m); }", arg=names[0],
                             timeout=120_000)
    assert f"model={names[0]}" in answer.url and "dtypes=bfloat16" in answer.url
    context.close()


@pytest.mark.parametrize(("name", "width", "height", "gpu", "memory"), [("fits-desktop", 1280, 900, "RTX 4090", None),
                                                                        ("fits-narrow", 390, 844, None, "24GiB")])
def test_a_tab_link_opens_the_tab_with_its_answer(browser: Any, app_url: str, name: str, width: int, height: int, gpu: str | None,
                                                  memory: str | None, tmp_path: Path) -> None:
    """A LoRA question by link, for a swept GPU (the sweep's own fit, largest batch and sequence) and for a typed size."""
    sweep = whatfits.load(str(whatfits.SHIPPED))
    use = "lora" if "lora" in sweep.uses() else sweep.uses()[0]
    dtype = sweep.dtypes(use)[0]
    query = whatfits.Query(gpu=gpu, memory=memory, use=use, dtype=dtype, scenario=sweep.scenarios(use, dtype)[0], filter="")
    truth = whatfits.answer(sweep, query)
    assert truth.fitting > 0
    context = browser.new_context(viewport={"width": width, "height": height}, device_scale_factor=1)
    page = context.new_page()
    page.set_default_timeout(90_000)
    page.goto(app_url + "?" + whatfits.to_params(query))
    first = truth.table["Model"].iloc[0].split("]")[0][1:]
    wait_for_table(page, first)
    assert shown_models(page) == [cell.split("]")[0][1:] for cell in truth.table["Model"]]
    assert any(cell.startswith("Needed GiB") for cell in grid_rows(page)[0])
    assert page.locator("#fits-memory input, #fits-memory textarea").first.input_value() == (memory or "")
    # the tab names its dataset, and never lists a row whose own notes say its simulation failed (independently read here)
    source = page.locator("#fits-source").inner_text()
    frame = sweep.frame
    assert f"{frame['model'].nunique()} models" in source and "shipped with the app" in source and "ESTIMATOR_SWEEP_DATASET" in source
    assert "GPUs swept: " + ", ".join(sorted(frame["gpu"].dropna().unique())) in source
    part = frame[(frame["use"] == use) & (frame["dtype"] == dtype) & (frame["scenario"] == query.scenario)]
    failed = set(part.loc[part["notes"].fillna("").str.contains("simulation failed"), "model"])
    assert "google-bert/bert-base-cased" in failed  # the shipped dataset's case: 2048 tokens past its 512 positions
    assert not failed & set(shown_models(page))
    assert "not listed because their simulation failed" in page.locator("#fits-status").inner_text()
    if gpu:  # the sweep's largest batch on that GPU is shown
        assert [row[5] for row in grid_rows(page)[1]] == ["" if v is pd.NA else str(v) for v in truth.table["Max batch"]]
    target = REPO_ROOT / "docs" / "screenshots" if os.environ.get("UPDATE_SCREENSHOTS") else tmp_path
    target.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(target / f"{name}.png"), full_page=True)
    scroll_width = page.evaluate("() => document.documentElement.scrollWidth")
    context.close()
    assert scroll_width <= width + 1, "the page scrolls sideways"


def test_a_bad_memory_size_says_what_to_type(browser: Any, app_url: str) -> None:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(90_000)
    page.goto(app_url + "?fits_memory=lots&fits_use=load")
    page.wait_for_function("() => { const s = document.querySelector('#fits-status'); return s && s.innerText.includes('24GiB'); }")
    status = page.locator("#fits-status").inner_text()
    assert "Traceback" not in page.content() and "--" not in status and "“Or its memory”" in status
    context.close()


def test_serving_rows_show_the_kv_cache_and_concurrency_not_a_budget_as_peak(browser: Any, app_url: str) -> None:
    query = whatfits.Query(gpu="RTX 4090", use="serving", dtype="bfloat16")
    truth = expected(query)
    assert truth.fitting > 0
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(90_000)
    page.goto(app_url + "?" + whatfits.to_params(query))
    wait_for_table(page, truth.table["Model"].iloc[0].split("]")[0][1:])
    header, rows = grid_rows(page)
    context.close()
    names = [h.replace("⋮", "").strip() for h in header if h.strip()]
    assert names[:7] == list(whatfits.SERVING_COLUMNS)[:7] and not any("Peak" in h for h in names)
    assert [row[1] for row in rows] == [f"{v}" for v in truth.table["KV cache tokens"]]
