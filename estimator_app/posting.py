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

import hashlib
import json
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from estimator.errors import PostingError
from estimator.source import hub
from estimator.units import format_bytes
from estimator_app.fields import OPTIONS, short_label
from estimator_app.tables import method_label

if TYPE_CHECKING:
    from estimator.result import Estimate

APP_NAME = "Model Memory Estimator"
PUBLIC_URL_ENV = "ESTIMATOR_APP_PUBLIC_URL"
METHOD_SENTENCES = {
    "load": "The model was built with its own code on PyTorch's meta device, or read from its safetensors headers, "
    "so every parameter and buffer is counted exactly without downloading weights. "
    "Training figures are weights, gradients and AdamW states (with fp32 master weights for 16-bit rows); "
    "activations are not included.",
    "inference": "The model was built on PyTorch's meta device and its real forward pass (generate's prefill, then each "
    "new token) was run under fake tensors, tracking the bytes alive at each instant; the peak is the largest total.",
    "training": "The model was built on PyTorch's meta device and its real forward, backward and optimizer step was run "
    "under fake tensors, tracking the bytes alive at each instant; the peak is the largest total.",
    "serving": "vLLM V1's start-up budget: the GPU's memory times the utilization, less the weights and the peak of vLLM's "
    "profile run (its real forward and sampler run under fake tensors), divided into KV-cache blocks.",
}


Existing = hub.DiscussionLink  # a discussion already on the repo with our title


def public_base(environ: Mapping[str, str] | None = None) -> str | None:
    """The page's public address for links in a post: ``ESTIMATOR_APP_PUBLIC_URL``, else the Space's own host.

    A Space sets ``SPACE_HOST`` (``user-name.hf.space``). Elsewhere (a local run) there is no public
    address, and a post carries the link's query instead of a loopback URL nobody else can open.
    """
    env = os.environ if environ is None else environ
    base = (env.get(PUBLIC_URL_ENV) or "").strip()
    if not base and env.get("SPACE_HOST"):
        base = "https://" + env["SPACE_HOST"].strip().split(",")[0] + "/"
    if not base:
        return None
    base = base.split("?", 1)[0].split("#", 1)[0]
    return base if base.endswith("/") else base + "/"


def public_link(query: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The public share link for ``query`` (see :func:`public_base`), or ``None`` without a public address."""
    base = public_base(environ)
    return f"{base}?{query}" if base and query else None


def repo_id(estimate: Estimate) -> str:
    """The Hub repo to post on; only Hub results can be posted."""
    if estimate.source != "hub":
        raise PostingError("Only results for a model on the Hub can be posted; this one came from a local folder.", model_id=estimate.model)
    return estimate.model


def options_key(estimate: Estimate) -> str:
    """A short digest of every option that shaped the result (``Estimate.options``, the commit included)."""
    text = json.dumps(estimate.options, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def _shape(options: Mapping[str, Any]) -> list[str]:
    """The options beyond mode and dtypes that a reader of a title wants to see, in words."""
    words = []
    if options.get("batch_size") not in (None, 1):
        words.append(f"batch {options['batch_size']}")
    if options.get("seq_len"):
        words.append(f"seq {options['seq_len']}")
    if options.get("image_size"):
        words.append(f"image {options['image_size']}")
    if options.get("max_new_tokens"):
        words.append(f"+{options['max_new_tokens']} tokens")
    if options.get("mode") == "training":
        words.append(str(options.get("optimizer") or "adamw"))
        if options.get("lora_rank"):
            words.append(f"LoRA r={options['lora_rank']}")
        if options.get("pure_16bit"):
            words.append("pure 16-bit")
        if options.get("gradient_checkpointing"):
            words.append("checkpointing")
    if options.get("mode") == "serving":
        words.extend(f"{key.replace('_', ' ')} {options[key]}" for key in ("gpu", "gpu_memory", "max_model_len", "max_num_seqs")
                     if options.get(key) is not None)
    elif options.get("gpu") or options.get("gpu_memory"):
        words.append(f"on {options.get('gpu') or options.get('gpu_memory')}")
    if options.get("device") == "cpu":
        words.append("cpu")
    return words


def title(estimate: Estimate) -> str:
    """The discussion title, and the duplicate key: mode, dtypes, the main options in words, and a digest of all of them.

    Two results share a title exactly when every option that shaped them (``Estimate.options``:
    batch, sequence length, optimizer, commit, ...) is the same.
    """
    dtypes = ", ".join(str(row.dtype) for row in estimate.rows)
    shape = "; ".join([estimate.mode.value, dtypes, *([", ".join(_shape(estimate.options))] if _shape(estimate.options) else [])])
    return f"Memory needed ({shape}) [{options_key(estimate)}], from the {APP_NAME}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


# The options in a post are named as the form labels them, without the labels' hints; a posted
# result names its commit, and a reader of the post did not fill "Your GPU".
_OPTION_NAMES = {keyword: short_label(field) for keyword, field in OPTIONS.items() if keyword != "token"} | {
    "revision": "Commit",
    "mode": "Mode",  # the value is the mode's name (serving), which the form's "What to do" words differently
    "gpu": "GPU",
    "gpu_memory": "GPU memory",
    "trust_remote_code": "Runs the repo's own code",
}


def _value(name: str, value: Any) -> str:
    if value is None:
        return {"lora_rank": "none (full fine-tuning)", "lora_targets": "peft's defaults"}.get(name, "the model's default")
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value)
    return str(value)


def options_lines(estimate: Estimate) -> list[str]:
    """The options as a Markdown list, in words: ``- Batch size: 4``."""
    lines = []
    for name, value in estimate.options.items():
        shown = _cell(_value(name, value))
        shown = f"`{shown}`" if name == "revision" and value else shown
        lines.append(f"- {_OPTION_NAMES.get(name, name.replace('_', ' ').capitalize())}: {shown}")
    return lines


def body(estimate: Estimate, query: str, environ: Mapping[str, str] | None = None) -> str:
    """Markdown: the table with exact figures, the options used, the method, and the public share link."""
    mode = estimate.mode.value
    peak = mode != "load"
    header = ["dtype"] + ([f"Peak ({mode})"] if peak else []) + ["Total size", "Largest layer"]
    header += [] if mode == "inference" else ["Training with Adam (no activations)"]
    header += ["method"]
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
        cells = [str(row.dtype)] + ([both(row.peak_bytes)] if peak else []) + [both(row.total_bytes), both(row.largest_layer_bytes)]
        cells += [] if mode == "inference" else [both(row.training_adam_bytes)]
        cells.append(method_label(row))
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    link = public_link(query, environ)
    lines += ["", "Options:", "", *options_lines(estimate), "", f"How: {METHOD_SENTENCES[mode]} Binary units (1 GiB = 1024³ bytes).", ""]
    if link:
        lines.append(f"Reproduce it: [open this result in the {APP_NAME}]({link})")
    elif query:
        lines.append(f"Reproduce it: open the {APP_NAME} with the query `?{_cell(query)}`")
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


def draft(last: Estimate, query: str) -> str:
    """What would be posted for ``last`` (title, repo and body), with no Hub request: shown with every result."""
    where = f" (on {last.model})" if last.source == "hub" else ""
    return f"**{title(last)}**{where}\n\n" + body(last, query)


def preview(last: Estimate, query: str, token: str | None) -> tuple[str, str]:
    """The body that would be posted, and a status line: whether the repo already has a discussion with our title."""
    repo = repo_id(last)
    existing = find_existing(repo, title(last), token=token)
    status = existing_note(existing) if existing else f"No discussion with this title on {repo} yet. Post it when it reads right."
    return draft(last, query), status


def publish(last: Estimate, query: str, token: str | None) -> str:
    """Post with the visitor's token, unless the discussion exists; a Markdown link to the discussion."""
    repo = repo_id(last)
    wanted = title(last)
    existing = find_existing(repo, wanted, token=token)
    if existing:
        return existing_note(existing)
    url = post(repo, wanted, body(last, query), token=token or "")
    return f"Posted: [{url}]({url})"


__all__ = ["Existing", "PostingError", "body", "draft", "options_key", "public_link", "existing_note", "find_existing", "post", "preview", "publish", "repo_id", "title"]
