"""Posting a result as a Hub discussion, in the browser, against the stand-in (which records every post)."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tests.browser.test_page import wait_for_result

pytestmark = pytest.mark.browser
MODEL = "FacebookAI/roberta-base"
TOKEN = "hf_standin_user"  # the stand-in's write token for user standin-user


def standin(url: str, path: str, method: str = "GET") -> Any:
    request = urllib.request.Request(url.rstrip("/") + path, method=method, data=b"" if method == "POST" else None)
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read() or b"null")


@pytest.fixture
def clean_standin(hub_server: str) -> Iterator[str]:
    """The session's stand-in with no discussions, before and after (other tests count theirs)."""
    standin(hub_server, "/_standin/reset", "POST")
    yield hub_server
    standin(hub_server, "/_standin/reset", "POST")


def test_preview_then_post_with_the_user_s_token_then_no_duplicate(page: Any, app_url: str, clean_standin: str) -> None:
    hub_server = clean_standin
    page.goto(app_url + f"?model={MODEL}&dtypes=float32,float16")
    wait_for_result(page, MODEL)
    link = page.locator("#share-link textarea, #share-link input").first.input_value()
    page.locator("#post").click()  # open the accordion
    page.locator("#post-token input, #post-token textarea").first.fill(TOKEN)
    page.locator("#post-preview-button").click()
    page.wait_for_function("() => document.querySelector('#post-status').innerText.includes('No discussion with this title')")
    preview = page.locator("#post-preview").inner_text()
    assert "Memory needed (load; float32, float16)" in preview and "bytes)" in preview
    page.locator("#post-button").click()
    page.wait_for_function("() => document.querySelector('#post-status').innerText.includes('Posted:')")
    posted_url = page.locator("#post-status a").first.get_attribute("href")

    posts = standin(hub_server, "/_standin/discussions")
    posts = posts["discussions"] if isinstance(posts, dict) else posts
    assert len(posts) == 1
    post = posts[0]
    assert post["repo"] == MODEL
    assert post["token"] == TOKEN
    assert post["author"] == "standin-user"
    assert post["title"] == "Memory needed (load; float32, float16), from the Model Memory Estimator"
    assert "| float32 |" in post["description"] and "| float16 |" in post["description"]
    assert link in post["description"]
    assert posted_url.endswith(f"/{MODEL}/discussions/{post['num']}")

    # a second post offers the existing discussion instead of a duplicate
    page.locator("#post-button").click()
    page.wait_for_function("() => document.querySelector('#post-status').innerText.includes('already has this discussion')")
    assert page.locator("#post-status a").first.get_attribute("href") == posted_url
    again = standin(hub_server, "/_standin/discussions")
    assert len(again["discussions"] if isinstance(again, dict) else again) == 1
