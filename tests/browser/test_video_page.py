"""A video-language model's share link with a 4-frame video, in real headless Chromium (docs/multimodal.md, "Video")."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest

from estimator.units import format_bytes
from tests.browser.conftest import cli_json
from tests.browser.test_page import table_by_dtype, wait_for_result

pytestmark = pytest.mark.browser
VIDEO_LM = "estimator-test/tiny-llava-next-video"


def test_video_share_link_with_four_frames(page: Any, app_url: str, app_env: dict[str, str]) -> None:
    page.goto(app_url + f"?model={VIDEO_LM}&dtypes=float32&mode=inference&seq=32&new_tokens=4&device=cpu&video=4")
    wait_for_result(page, VIDEO_LM)
    truth = cli_json(VIDEO_LM, app_env, "--dtypes", "float32", "--mode", "inference", "--seq-len", "32", "--max-new-tokens", "4",
                     "--device", "cpu", "--video-frames", "4")
    row = truth["rows"][0]
    # the repo's video_preprocessor_config.json: 32 px frames; each frame's 4x4 patches pooled by 2: 4 tokens a frame
    assert "4 video frames of 32x32 px per prompt (one video), 16 video tokens + 32 text tokens" in " ".join(row["notes"])
    assert truth["options"]["video_frames"] == 4
    assert table_by_dtype(page)["float32"]["Peak (inference)"] == format_bytes(row["peak_bytes"])
    page.wait_for_function("() => document.querySelector('#method')?.innerText.includes('4 video frames of 32x32 px per prompt')")
    link = page.locator("#share-link textarea, #share-link input").first.input_value()
    params = dict(parse_qsl(urlsplit(link).query))
    assert (params["video"], params["images"]) == ("4", "auto")
