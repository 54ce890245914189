"""The page's event handlers: form values in, output values out; never a ``gr.Error``.

Each failure is worded for a visitor by :func:`estimator_app.wording.page_message` (form labels,
not CLI flags), never a traceback; a bug is logged with its traceback on the server only. A failed request shows one
message (:func:`error_html`, in the ``status`` box above the results) and leaves the last good
result on screen, marked as such; nothing turns into an error badge. :data:`OUTPUTS` and
:data:`~estimator_app.fields.FIELDS` name, in order, the widgets the handlers answer and read.
"""

from __future__ import annotations

import logging
from html import escape
from typing import Any

import gradio as gr

from estimator.errors import EstimatorError
from estimator.result import Estimate
from estimator_app import answers, form, howmany, posting, tables
from estimator_app.wording import PAGE, for_form, page_message

logger = logging.getLogger("estimator_app")

# The widgets an estimate fills, in the order the estimate handlers return their values.
OUTPUTS: tuple[str, ...] = (
    "status", "result_area", "summary", "results", "csv", "json", "query", "chart", "fits", "method", "last",
    "post_preview", "post_status",
)
N_OUTPUTS = len(OUTPUTS)
POST_HINT = "Press **Preview** to check the model's discussions for this result, or **Post** to open one."


def error_html(title: str, message: str, last: Estimate | None = None) -> str:
    """One message for a failed request (escaped: the visitor's text is shown as typed), and what stays on screen."""
    kept = ""
    if last is not None:
        kept = f" The result below is still the last one that worked ({escape(last.model)}); the share link and Post are for it."
    return f'<div class="mme-error" role="alert"><strong>{escape(title)}.</strong> {escape(message)}{kept}</div>'


def _failed(title: str, message: str, last: Estimate | None) -> tuple[Any, ...]:
    """Outputs after a failure: the message; the last good result stays, marked as such."""
    values: dict[str, Any] = {name: gr.skip() for name in OUTPUTS}
    values["status"] = error_html(title, message, last)
    if last is not None:
        values["summary"] = tables.summary_html(last, stale=True)
    return tuple(values[name] for name in OUTPUTS)


def _worded(exc: BaseException, title: str, *, query: str = "", model: str = "") -> str:
    """The visitor's message for ``exc``; a bug (status 1) is logged with its traceback."""
    message, status = page_message(exc, for_form(query) if query else PAGE)
    if status == 1:
        logger.error("%s failed for %s", title, model or "a request", exc_info=exc)
    else:
        logger.info("refused %s: %s", model or "a request", message)
    return message


def _run(state: form.FormState, progress: Any, token: str | None, last: Estimate | None) -> tuple[Any, ...]:
    """Estimate ``state`` and render every output, as plain values in :data:`OUTPUTS` order."""
    progress(0.05, desc=f"Reading {state.model} from the Hub")
    try:
        result = answers.answer(state, token, admitted=lambda: progress(0.1, desc=f"Estimating {state.model}"))
    except Exception as exc:
        return _failed("Could not estimate", _worded(exc, "Could not estimate", query=form.to_query(state), model=state.model), last)
    progress(0.9, desc="Rendering")
    shown = answers.rendered(result, state.gpu, state.device)
    query = form.to_query(answers.pinned(state, result.revision))
    # Plain values, not component instances: an update object makes Gradio rebuild the component's
    # whole config (a JSON schema) on every answer, which was most of the server's time per request.
    values = {
        "status": "",
        "result_area": gr.Column(visible=True),
        "summary": shown.summary,
        "results": shown.table,
        "csv": shown.csv_path,
        "json": shown.json_path,
        "query": query,
        "chart": shown.chart,
        "fits": shown.fits,
        "method": shown.method,
        "last": result,
        "post_preview": posting.draft(result, query),
        "post_status": POST_HINT,
    }
    return tuple(values[name] for name in OUTPUTS)


def run_form(*values: Any, progress: gr.Progress = gr.Progress()) -> tuple[Any, ...]:  # noqa: B008  - Gradio injects progress through this default, by design - Gradio's idiom
    """The form's fields, then the token field and the last result shown."""
    *fields, token, last = values
    try:
        state = form.from_form(*fields)
        form.check(state)
    except ValueError as exc:
        return _failed("Check the form", str(exc), last)
    return _run(state, progress, token, last)


def run_on_load(autorun: bool, *values: Any, progress: gr.Progress = gr.Progress()) -> tuple[Any, ...]:  # noqa: B008
    """After a share link filled the form: run it, with no click. Without a model, change nothing."""
    if not autorun:
        return tuple(gr.skip() for _ in range(N_OUTPUTS))
    return run_form(*values, progress=progress)


def count_form(*values: Any) -> str:
    """"How many GPUs do I need?": the form's fields, then the token field and the last result shown; the answer's HTML."""
    *fields, token, last = values
    if last is None:
        return error_html("Nothing to count", "Estimate a model first; then count the GPUs it needs.")
    state: form.FormState | None = None
    try:
        state = form.from_form(*fields)
        form.check(state)
        counted = howmany.count(state, token)
    except EstimatorError as exc:
        query, model = (form.to_query(state), state.model) if state is not None else ("", "")
        return error_html("Could not count GPUs", _worded(exc, "Could not count GPUs", query=query, model=model))
    except ValueError as exc:
        return error_html("Check the form", str(exc))
    except Exception as exc:
        return error_html("Could not count GPUs", _worded(exc, "Could not count GPUs", model=str(fields[0])))
    return howmany.count_html(counted)


def training_fields(mode: str | None) -> Any:
    """The first screen's training row (LoRA rank, checkpointing): shown when the mode is training."""
    return gr.Row(visible=mode == "training")


def load_link(request: gr.Request) -> tuple[Any, ...]:
    """Fill the form from the page URL's query parameters; then the notices, and whether to run."""
    raw: Any = getattr(request, "query_params", None) if request is not None else None
    params = list(raw.multi_items()) if hasattr(raw, "multi_items") else list(dict(raw or {}).items())
    parsed = form.from_query(params)
    notice = ""
    if parsed.notices:
        notice = "**Some link parameters were ignored:**\n" + "\n".join(f"- {n}" for n in parsed.notices)
    return (*form.to_fields(parsed.state), gr.Markdown(notice, visible=bool(notice)), bool(parsed.state.model) and parsed.given)


def _post_token(typed: str | None, oauth_token: gr.OAuthToken | None) -> str | None:
    """The visitor's own token: the OAuth login's on a Space, else the one they typed. Never the server's."""
    if oauth_token is not None and getattr(oauth_token, "token", None):
        return str(oauth_token.token)
    return (typed or "").strip() or None


NOTHING_TO_POST = "Estimate a model first; then its result can be posted."


def preview_post(last: Estimate | None, query: str, typed: str | None, oauth_token: gr.OAuthToken | None = None) -> tuple[Any, str]:
    """The body that would be posted, and whether the repo already has a discussion with our title (or why not)."""
    if last is None:
        return gr.skip(), error_html("Nothing to post", NOTHING_TO_POST)
    try:
        return posting.preview(last, query, _post_token(typed, oauth_token))
    except Exception as exc:
        return gr.skip(), error_html("Cannot post", _worded(exc, "Cannot post", model=last.model))


def post_result(last: Estimate | None, query: str, typed: str | None, oauth_token: gr.OAuthToken | None = None) -> tuple[str, Any]:
    """Post with the visitor's token, unless the discussion exists; a Markdown link to it, and the token field cleared."""
    if last is None:
        return error_html("Nothing to post", NOTHING_TO_POST), gr.skip()
    try:
        done = posting.publish(last, query, _post_token(typed, oauth_token))
    except Exception as exc:
        return error_html("Could not post", _worded(exc, "Could not post", model=last.model)), gr.skip()
    return done, ""
