"""The speed answer on the page, at 1280 and 390 px: beside the verdict under the summary ("fits · ~N tok/s decode,
TTFT x") and a "Speed (roofline)" column in the "fits on" table, one figure per GPU from the same traced costs
(``UPDATE_SCREENSHOTS=1`` keeps the screenshots in docs/screenshots/)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from estimator.speed.transformers_speed import short_speed
from tests.browser.conftest import cli_json
from tests.browser.test_first_screen import SIZES, _context, _no_sideways_scroll, _shot
from tests.browser.test_page import MODEL, grid_rows, wait_for_result

pytestmark = pytest.mark.browser
QUERY = "mode=inference&dtypes=float32&seq=64&new_tokens=16&gpu=RTX%204090"


def test_the_speed_answer_beside_the_verdict(browser: Any, app_url: str, app_env: dict[str, str], tmp_path: Path) -> None:
    """One answer, looked at on a desktop's width and then a phone's (the page resized): the same figures, no sideways
    scrolling at either."""
    _, width, height = SIZES[0]
    context, page = _context(browser, width, height)
    page.goto(app_url + f"?model={MODEL}&{QUERY}")
    wait_for_result(page, MODEL)
    page.locator("#speed").wait_for()
    speed = page.locator("#speed").inner_text()
    header, *lines = grid_rows(page, "fits")
    fits_width = {}
    for size, w, h in SIZES:
        page.set_viewport_size({"width": w, "height": h})
        page.evaluate("() => document.querySelector('#setting').scrollIntoView({block: 'start'})")
        page.wait_for_timeout(300)
        _shot(page, f"speed-answer-{size}", tmp_path)  # the summary's speed line and the "fits on" table's first lines
        fits_width[size] = _no_sideways_scroll(page)
    context.close()
    cli = cli_json(MODEL, app_env, "--mode", "inference", "--dtypes", "float32", "--seq-len", "64", "--max-new-tokens", "16",
                   "--gpu", "RTX 4090")["rows"][0]
    assert speed == f"float32: fits · {short_speed(cli['speed'])} on RTX 4090 (roofline)"
    assert "tok/s decode" in speed and "TTFT" in speed
    column = header.index("Speed (roofline)")
    cells = {line[0]: line[column] for line in lines}
    assert cells["RTX 4090 (selected)"] == short_speed(cli["speed"])  # the same figure as the summary's, from the same costs
    assert len(lines) > 60 and all("tok/s decode" in c for c in cells.values()), cells  # every GPU gets its own figure
    assert all(fits_width.values()), f"the page scrolls sideways: {fits_width}"
