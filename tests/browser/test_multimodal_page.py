"""A vision-language model's share link with 2 images, in real headless Chromium (docs/multimodal.md)."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest

from estimator.units import format_bytes
from tests.browser.conftest import cli_json
from tests.browser.test_page import table_by_dtype, wait_for_result

pytestmark = pytest.mark.browser
VLM = "estimator-test/tiny-llava"


def test_vlm_share_link_with_two_images(page: Any, app_url: str, app_env: dict[str, str]) -> None:
    page.goto(app_url + f"?model={VLM}&dtypes=float32&mode=inference&seq=32&new_tokens=4&device=cpu&images=2")
    wait_for_result(page, VLM)
    truth = cli_json(VLM, app_env, "--dtypes", "float32", "--mode", "inference", "--seq-len", "32", "--max-new-tokens", "4",
                     "--device", "cpu", "--images", "2")
    row = truth["rows"][0]
    assert "2 images of 32x32 px per prompt" in " ".join(row["notes"])
    assert table_by_dtype(page)["float32"]["Peak (inference)"] == format_bytes(row["peak_bytes"])
    page.wait_for_function("() => document.querySelector('#method')?.innerText.includes('2 images of 32x32 px per prompt')")
    assert "Image / audio encoder activations" in page.locator("#chart").inner_text()
    link = page.locator("#share-link textarea, #share-link input").first.input_value()
    params = dict(parse_qsl(urlsplit(link).query))
    assert (params["images"], params["audio"]) == ("2", "auto")
