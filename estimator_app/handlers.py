"""The page's event handlers: form values in, output values out; every failure a ``gr.Error``.

Each failure is worded for a visitor by :mod:`estimator_app.wording` through
:func:`estimator.messages.user_message` (form labels, not CLI flags) and shown as a toast, never a
traceback; a bug is logged with its traceback on the server only. :data:`OUTPUTS` and
:data:`~estimator_app.fields.FIELDS` name, in order, the widgets the handlers answer and read.
"""

from __future__ import annotations

import logging
from typing import Any

import gradio as gr

from estimator.messages import user_message
from estimator.result import Estimate
from estimator_app import answers, form, posting
from estimator_app.wording import PAGE, for_form

logger = logging.getLogger("estimator_app")

# The widgets an estimate fills, in the order the estimate handlers return their values.
OUTPUTS: tuple[str, ...] = (
    "result_area", "summary", "results", "csv", "json", "query", "chart_title", "plot", "fits", "fits_note", "method", "last",
)
N_OUTPUTS = len(OUTPUTS)


def _refuse(exc: BaseException, title: str, *, query: str = "", model: str = "") -> gr.Error:
    """The visitor's toast for ``exc``; a bug (status 1) is logged with its traceback."""
    message, status = user_message(exc, for_form(query) if query else PAGE)
    if status == 1:
        logger.error("%s failed for %s", title, model or "a request", exc_info=exc)
    else:
        logger.info("refused %s: %s", model or "a request", message)
    return gr.Error(message, title=title, print_exception=False)


def _state(*values: Any) -> form.FormState:
    try:
        return form.from_form(*values)
    except ValueError as exc:
        raise gr.Error(str(exc), title="Check the form", print_exception=False) from None


def _run(state: form.FormState, progress: Any, token: str | None = None) -> tuple[Any, ...]:
    """Estimate ``state`` and render every output, as plain values in :data:`OUTPUTS` order."""
    progress(0.05, desc=f"Reading {state.model} from the Hub")
    try:
        result = answers.answer(state, token, admitted=lambda: progress(0.1, desc=f"Estimating {state.model}"))
    except Exception as exc:
        raise _refuse(exc, "Could not estimate", query=form.to_query(state), model=state.model) from None
    progress(0.9, desc="Rendering")
    shown = answers.rendered(result, state.gpu)
    # Plain values, not component instances: an update object makes Gradio rebuild the component's
    # whole config (a JSON schema) on every answer, which was most of the server's time per request.
    values = {
        "result_area": gr.Column(visible=True),
        "summary": shown.summary,
        "results": shown.table,
        "csv": shown.csv_path,
        "json": shown.json_path,
        "query": form.to_query(answers.pinned(state, result.revision)),
        "chart_title": f"**{shown.chart_title}**",
        "plot": shown.chart,
        "fits": shown.fits,
        "fits_note": shown.fits_caption,
        "method": shown.method,
        "last": result,
    }
    return tuple(values[name] for name in OUTPUTS)


def run_form(*values: Any, progress: gr.Progress = gr.Progress()) -> tuple[Any, ...]:  # noqa: B008  - Gradio injects progress through this default, by design - Gradio's idiom
    """The form's fields, then the token field."""
    *fields, token = values
    return _run(_state(*fields), progress, token)


def run_on_load(autorun: bool, *values: Any, progress: gr.Progress = gr.Progress()) -> tuple[Any, ...]:  # noqa: B008
    """After a share link filled the form: run it, with no click. Without a model, change nothing."""
    if not autorun:
        return tuple(gr.skip() for _ in range(N_OUTPUTS))
    return run_form(*values, progress=progress)


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


def _posted(last: Estimate | None) -> Estimate:
    if last is None:
        raise gr.Error("Estimate a model first; then its result can be posted.", title="Nothing to post", print_exception=False)
    return last


def preview_post(last: Estimate | None, link: str, typed: str | None, oauth_token: gr.OAuthToken | None = None) -> tuple[str, str]:
    """The body that would be posted, and whether the repo already has a discussion with our title."""
    result = _posted(last)
    try:
        return posting.preview(result, link, _post_token(typed, oauth_token))
    except Exception as exc:
        raise _refuse(exc, "Cannot post", model=result.model) from None


def post_result(last: Estimate | None, link: str, typed: str | None, oauth_token: gr.OAuthToken | None = None) -> str:
    """Post with the visitor's token, unless the discussion exists; return a Markdown link to it."""
    result = _posted(last)
    try:
        return posting.publish(result, link, _post_token(typed, oauth_token))
    except Exception as exc:
        raise _refuse(exc, "Could not post", model=result.model) from None
