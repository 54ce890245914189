"""The page as a newcomer meets it, at 1280 and 390 px: the usual questions up front, the answer's setting in its first
line, and "How many GPUs do I need?" (``UPDATE_SCREENSHOTS=1`` keeps the screenshots in docs/screenshots/)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from estimator.units import format_bytes
from testkit.hub_process import REPO_ROOT
from tests.browser.conftest import cli_json
from tests.browser.test_page import MODEL, wait_for_result

pytestmark = pytest.mark.browser
SIZES = [("desktop", 1280, 900), ("narrow", 390, 844)]


def _context(browser: Any, width: int, height: int) -> tuple[Any, Any]:
    context = browser.new_context(viewport={"width": width, "height": height}, device_scale_factor=1)
    page = context.new_page()
    page.set_default_timeout(300_000)
    return context, page


def _shot(page: Any, name: str, tmp_path: Path, *, full: bool = False, selector: str | None = None) -> None:
    target = REPO_ROOT / "docs" / "screenshots" if os.environ.get("UPDATE_SCREENSHOTS") else Path(os.environ.get("SHOTS_DIR") or tmp_path)
    target.mkdir(parents=True, exist_ok=True)
    if selector:
        page.locator(selector).screenshot(path=str(target / f"{name}.png"))
    else:
        page.screenshot(path=str(target / f"{name}.png"), full_page=full)


def _no_sideways_scroll(page: Any) -> bool:
    return bool(page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth + 1"))


@pytest.mark.parametrize(("size", "width", "height"), SIZES)
def test_the_first_screen_asks_what_gpu_and_context_without_advanced(browser: Any, app_url: str, size: str, width: int, height: int,
                                                                     tmp_path: Path) -> None:
    context, page = _context(browser, width, height)
    page.goto(app_url)
    page.locator("#go").wait_for()
    page.wait_for_timeout(1500)  # the load event (the page's defaults) runs right after mounting
    for field in ("#model", "#mode", "#gpu", "#seq", "#dtypes", "#examples-label"):
        assert page.locator(field).first.is_visible(), field
    assert not page.locator("#token").is_visible()  # Advanced is closed: its last field is hidden
    modes = page.locator("#mode label").all_inner_texts()
    assert [m.strip() for m in modes] == ["Load (weights)", "Run (inference)", "Fine-tune (training)", "Serve (vLLM)"]
    assert page.locator("#dtypes").get_by_label("bfloat16").is_checked()
    assert page.locator("#examples-label").inner_text().strip() == "Examples:"
    # the button comes right after the few first-screen fields, never after the thirty under Advanced
    above = page.evaluate("""() => { const go = document.querySelector('#go').getBoundingClientRect().top;
        return [...document.querySelectorAll('input, textarea, select')].filter(e => e.offsetParent !== null
          && e.getBoundingClientRect().top < go).length; }""")
    go = page.locator("#go").bounding_box()
    assert not page.locator("#lora").is_visible()  # LoRA is asked when fine-tuning
    _shot(page, f"first-screen-{size}", tmp_path, full=size == "narrow")
    page.locator("#mode").get_by_role("radio", name="Fine-tune").check()
    page.locator("#lora").wait_for(state="visible")
    assert page.locator("#checkpointing").is_visible()
    ok = _no_sideways_scroll(page)
    context.close()
    assert above <= 20, f"{above} inputs above the button"  # model, 4 modes, GPU, context, 6 dtypes (+ a dropdown's own input)
    assert go is not None and go["y"] + go["height"] <= (height if size == "desktop" else 2.2 * height)
    assert ok, "the page scrolls sideways"


def test_the_answer_states_its_setting_and_how_many_gpus(browser: Any, app_url: str, app_env: dict[str, str], tmp_path: Path) -> None:
    """Full fine-tuning of GPT-2 in float32 at 128 tokens on a 2 GiB GPU: it does not fit one; the count says 2 with fsdp,
    and its figure per GPU is the command line's for 2 GPUs with fsdp. One answer, looked at on a desktop's width and
    then a phone's (the page resized, as the serving view's test does): neither scrolls sideways."""
    _, width, height = SIZES[0]
    context, page = _context(browser, width, height)
    page.goto(app_url + f"?model={MODEL}&mode=training&dtypes=float32&seq=128&gpu_memory=2GiB")
    wait_for_result(page, MODEL)
    setting = page.locator("#setting").inner_text()
    assert setting == "Fine-tune, full, adamw · float32 · batch 1 × 128 tokens · on 2GiB"
    assert "choose a GPU to have the allocator replayed" not in page.locator("#fits").inner_text()
    page.locator("#count-go").click()
    page.wait_for_function("() => (document.querySelector('#gpu-count')?.innerText || '').includes('How many GPUs')")
    text = page.locator("#gpu-count").inner_text()
    truth = cli_json(MODEL, app_env, "--mode", "training", "--dtypes", "float32", "--seq-len", "128", "--gpu-memory", "2GiB",
                     "--gpus", "2", "--strategy", "fsdp")
    fit = truth["rows"][0]["fit"]
    assert fit["fits"] is True
    assert f"float32: 2 × GPU with 2.00 GiB (fsdp over 2 GPUs): {format_bytes(fit['needed_bytes'])} per GPU (× 2) of 2.00 GiB" in text
    assert "; 1 does not fit (" in text
    fits_width = {}
    for size, w, h in SIZES:
        page.set_viewport_size({"width": w, "height": h})
        page.wait_for_timeout(300)
        fits_width[size] = _no_sideways_scroll(page)
        _shot(page, f"gpu-count-{size}", tmp_path, selector="#result-area")
    context.close()
    assert all(fits_width.values()), f"the page scrolls sideways: {fits_width}"


def test_a_long_input_wraps_in_its_alert_and_the_share_link_is_one_line(browser: Any, app_url: str) -> None:
    context, page = _context(browser, 390, 844)
    page.goto(app_url + f"?model={MODEL}&dtypes=float32")
    wait_for_result(page, MODEL)
    link = page.locator("#share-link input, #share-link textarea").first
    assert link.bounding_box()["height"] < 60  # one line (it was ~14 on a phone); the copy button takes it whole
    page.locator("#model input, #model textarea").first.fill("a" * 10_000)
    page.locator("#go").click()
    alert = page.locator("#status .mme-error")
    alert.wait_for()
    box, body = alert.bounding_box(), page.evaluate("() => document.documentElement.clientWidth")
    ok = _no_sideways_scroll(page)
    context.close()
    assert box is not None and box["x"] + box["width"] <= body + 1 and ok
