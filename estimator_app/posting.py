"""Post a result as a discussion on the model's Hub repo, with the visitor's own token.

Unlike accelerate's Space (a bot token, raw dicts in the body, ``webbrowser`` on the server), the
post is made with the token of the person asking (Gradio's OAuth login on a Space, or a token they
typed), the body is built here from exact figures, an existing discussion with the same title is
offered instead of a duplicate, and the discussion's URL is returned for the page to link.
The Hub requests are :mod:`estimator.source.hub`'s (timeouts, errors translated there); refusals
are :class:`~estimator.errors.PostingError`. Tokens are passed per call; they never reach a log
line or a cache. Nothing here imports Gradio.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from estimator.errors import PostingError
from estimator.source import hub
from estimator.units import format_bytes

if TYPE_CHECKING:
    from estimator.result import Estimate

APP_NAME = "Model Memory Estimator"
METHOD_SENTENCES = (
    "The model was built with its own code on PyTorch's meta device, or read from its safetensors headers, "
    "so every parameter and buffer is counted exactly without downloading weights. "
    "Training figures are weights, gradients and AdamW states (with fp32 master weights for 16-bit rows); "
    "activations are not included."
)


Existing = hub.DiscussionLink  # a discussion already on the repo with our title


def repo_id(estimate: Estimate) -> str:
    """The Hub repo to post on; only Hub results can be posted."""
    if estimate.source != "hub":
        raise PostingError("Only results for a model on the Hub can be posted; this one came from a local folder.", model_id=estimate.model)
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
    return hub.find_discussion(repo, wanted_title, token=token or None)


def post(repo: str, wanted_title: str, text: str, *, token: str) -> str:
    """Open the discussion with the visitor's ``token``; return its URL."""
    if not token:
        raise PostingError("Sign in with Hugging Face, or paste a token with the write-discussions permission, to post.", model_id=repo)
    return hub.open_discussion(repo, wanted_title, text, token=token).url


def existing_note(existing: Existing) -> str:
    return f"This model already has this discussion: [#{existing.num}]({existing.url}). Add to it there rather than opening a duplicate."


def preview(last: Estimate, link: str, token: str | None) -> tuple[str, str]:
    """The body that would be posted, and a status line: whether the repo already has a discussion with our title."""
    repo = repo_id(last)
    existing = find_existing(repo, title(last), token=token)
    text = f"**{title(last)}** (on {repo})\n\n" + body(last, link)
    status = existing_note(existing) if existing else f"No discussion with this title on {repo} yet. Post it when it reads right."
    return text, status


def publish(last: Estimate, link: str, token: str | None) -> str:
    """Post with the visitor's token, unless the discussion exists; a Markdown link to the discussion."""
    repo = repo_id(last)
    wanted = title(last)
    existing = find_existing(repo, wanted, token=token)
    if existing:
        return existing_note(existing)
    url = post(repo, wanted, body(last, link), token=token or "")
    return f"Posted: [{url}]({url})"


__all__ = ["Existing", "PostingError", "body", "existing_note", "find_existing", "post", "preview", "publish", "repo_id", "title"]
