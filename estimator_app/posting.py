"""Post a result as a discussion on the model's Hub repo, with the visitor's own token.

Unlike accelerate's Space (a bot token, raw dicts in the body, ``webbrowser`` on the server), the
post is made with the token of the person asking (Gradio's OAuth login on a Space, or a token they
typed), the body is built here from exact figures, an existing discussion with the same title is
offered instead of a duplicate, and the discussion's URL is returned for the page to link.
Tokens are passed per call to ``huggingface_hub``; they never reach a log line or a cache.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from estimator.units import format_bytes

if TYPE_CHECKING:
    from estimator.result import Estimate

logger = logging.getLogger(__name__)

APP_NAME = "Model Memory Estimator"
METHOD_SENTENCES = (
    "The model was built with its own code on PyTorch's meta device, or read from its safetensors headers, "
    "so every parameter and buffer is counted exactly without downloading weights. "
    "Training figures are weights, gradients and AdamW states (with fp32 master weights for 16-bit rows); "
    "activations are not included."
)


class PostingError(Exception):
    """A post that cannot be made; ``message`` is for the person who asked."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class Existing:
    """A discussion already on the repo with our title."""

    num: int
    url: str


def repo_id(estimate: Estimate) -> str:
    """The Hub repo to post on; only Hub results can be posted."""
    if estimate.source != "hub":
        raise PostingError("Only results for a model on the Hub can be posted; this one came from a local folder.")
    return estimate.model


def title(estimate: Estimate) -> str:
    """The discussion title: the same for the same model, mode and dtypes, which is what makes a duplicate."""
    dtypes = ", ".join(row.dtype for row in estimate.rows)
    return f"Memory needed ({estimate.mode}; {dtypes}), from the {APP_NAME}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def body(estimate: Estimate, link: str) -> str:
    """Markdown: the table with exact figures, the options used, the method, and the share link."""
    peak = estimate.mode != "load"
    header = ["dtype", "Total size", "Largest layer", "Training with Adam (no activations)"] + (["Peak"] if peak else []) + ["method"]
    lines = [
        f"Memory estimate for `{estimate.model}`"
        + (f" at commit `{estimate.revision}`" if estimate.revision else "")
        + (f" ({estimate.architecture}, {estimate.library})" if estimate.architecture else f" ({estimate.library})")
        + ":",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "|".join(["---"] + ["---:"] * (len(header) - 2) + ["---"]) + "|",
    ]

    def both(value: int | None) -> str:
        return "—" if value is None else f"{format_bytes(value)} ({value:,} bytes)"

    for row in estimate.rows:
        cells = [row.dtype, both(row.total_bytes), both(row.largest_layer_bytes), both(row.training_adam_bytes)]
        if peak:
            cells.append(both(row.peak_bytes))
        cells.append(row.method)
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    options = ", ".join(f"{key}={_cell(str(value))}" for key, value in estimate.options.items())
    lines += [
        "",
        f"Options: {options}.",
        "",
        f"How: {METHOD_SENTENCES} Binary units (1 GiB = 1024³ bytes).",
        "",
        f"Reproduce it: {link}" if link else "",
    ]
    return "\n".join(lines).rstrip() + "\n"


def find_existing(repo: str, wanted_title: str, *, token: str | None) -> Existing | None:
    """The first discussion on ``repo`` titled ``wanted_title``, if any (open or closed)."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError

    try:
        for discussion in HfApi().get_repo_discussions(repo, repo_type="model", token=token or None):
            if discussion.title == wanted_title and not discussion.is_pull_request:
                return Existing(num=discussion.num, url=discussion.url)
    except HfHubHTTPError as exc:
        raise PostingError(_hub_message(exc, repo, "read the discussions of")) from None
    return None


def post(repo: str, wanted_title: str, text: str, *, token: str) -> str:
    """Open the discussion with the visitor's ``token``; return its URL."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError

    if not token:
        raise PostingError("Sign in with Hugging Face, or paste a token with the write-discussions permission, to post.")
    try:
        discussion = HfApi().create_discussion(repo, title=wanted_title, description=text, repo_type="model", token=token)
    except HfHubHTTPError as exc:
        raise PostingError(_hub_message(exc, repo, "open a discussion on")) from None
    logger.info("posted discussion #%s on %s", discussion.num, repo)
    return discussion.url


def _hub_message(exc: Exception, repo: str, what: str) -> str:
    status = getattr(getattr(exc, "response", None), "status_code", None)
    if status == 401:
        return f"The Hub did not accept the token to {what} {repo}; check that it is valid (HTTP 401)."
    if status == 403:
        return f"The token may not {what} {repo}: it needs the write-discussions permission (HTTP 403)."
    if status == 404:
        return f"The Hub has no model {repo!r} (HTTP 404)."
    return f"The Hub could not {what} {repo} (HTTP {status or 'error'}); try again later."
