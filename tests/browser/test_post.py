"""Posting a result as a Hub discussion, in the browser, against the stand-in (which records every post)."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from estimator_app.posting import public_link
from tests.browser.conftest import PUBLIC_URL
from tests.browser.test_page import open_advanced, wait_for_result

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
    query = page.locator("#share-link textarea, #share-link input").first.input_value().split("?", 1)[1]
    link = public_link(query, {"ESTIMATOR_APP_PUBLIC_URL": PUBLIC_URL})
    page.locator("#post").click()  # open the accordion
    page.locator("#post-token input, #post-token textarea").first.fill(TOKEN)
    page.locator("#post-preview-button").click()
    page.wait_for_function("() => document.querySelector('#post-status')?.innerText.includes('No discussion with this title')")
    preview = page.locator("#post-preview").inner_text()
    assert "Memory needed (load; float32, float16) [" in preview and "bytes)" in preview
    page.locator("#post-button").click()
    page.wait_for_function("() => document.querySelector('#post-status')?.innerText.includes('Posted:')")
    posted_url = page.locator("#post-status a").first.get_attribute("href")

    posts = standin(hub_server, "/_standin/discussions")
    posts = posts["discussions"] if isinstance(posts, dict) else posts
    assert len(posts) == 1
    post = posts[0]
    assert post["repo"] == MODEL
    assert post["token"] == TOKEN
    assert post["author"] == "standin-user"
    assert post["title"].startswith("Memory needed (load; float32, float16) [")
    assert post["title"].endswith("], from the Model Memory Estimator")
    assert "| float32 |" in post["description"] and "| float16 |" in post["description"]
    assert f"({link})" in post["description"] and "127.0.0.1" not in post["description"]
    assert "['" not in post["description"] and "dtypes: float32, float16" in post["description"]  # words, not Python reprs
    assert page.locator("#post-token input, #post-token textarea").first.input_value() == ""  # the token is not kept
    assert posted_url.endswith(f"/{MODEL}/discussions/{post['num']}")

    # a second post offers the existing discussion instead of a duplicate
    page.locator("#post-token input, #post-token textarea").first.fill(TOKEN)
    page.locator("#post-button").click()
    page.wait_for_function("() => document.querySelector('#post-status')?.innerText.includes('already has this discussion')")
    assert page.locator("#post-status a").first.get_attribute("href") == posted_url
    again = standin(hub_server, "/_standin/discussions")
    assert len(again["discussions"] if isinstance(again, dict) else again) == 1


def test_a_post_after_a_second_estimate_carries_the_second_result(page: Any, app_url: str, clean_standin: str) -> None:
    """The preview follows every result, and Post sends the one on screen; another batch size is another discussion."""
    page.goto(app_url + f"?model={MODEL}&dtypes=float32&mode=inference&batch=1&seq=32")
    wait_for_result(page, MODEL)
    page.locator("#post").click()
    page.wait_for_function("() => document.querySelector('#post-preview')?.innerText.includes('Batch size: 1')")
    first_title = page.locator("#post-preview strong").first.inner_text()

    open_advanced(page)
    page.locator("#batch input").fill("4")
    page.locator("#go").click()
    page.wait_for_function("() => document.querySelector('#post-preview')?.innerText.includes('Batch size: 4')")
    second_title = page.locator("#post-preview strong").first.inner_text()
    assert second_title != first_title and "batch 4" in second_title
    peak = page.eval_on_selector("#results table", "t => t.querySelector('tbody td').textContent.trim()")

    page.locator("#post-token input, #post-token textarea").first.fill(TOKEN)
    page.locator("#post-button").click()
    page.wait_for_function("() => document.querySelector('#post-status')?.innerText.includes('Posted:')")
    posts = standin(clean_standin, "/_standin/discussions")
    posts = posts["discussions"] if isinstance(posts, dict) else posts
    assert len(posts) == 1
    assert posts[0]["title"] == second_title
    assert "Batch size: 4" in posts[0]["description"] and "batch=4" in posts[0]["description"]
    assert f"| float32 | {peak} (" in posts[0]["description"]  # the peak on screen, with its exact bytes
