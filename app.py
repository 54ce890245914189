"""The Space page: type a Hub model id, get the memory it needs per dtype.

``python app.py`` serves it (``GRADIO_SERVER_PORT`` / ``GRADIO_SERVER_NAME`` as for any Gradio
app, ``HF_ENDPOINT`` as for any Hub client). This module only wires widgets to the core
(:func:`estimator.estimate`) and to the pure helpers in :mod:`estimator_app`; errors reach the
page as ``gr.Error`` messages from :func:`estimator.messages.user_message`, never tracebacks.
The app never sets ``trust_remote_code`` and never sends the server's own Hub token.
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

import estimator_app.environment  # noqa: F401  - first: settings read when huggingface_hub is imported

# isort: split
import gradio as gr

from estimator import estimate
from estimator.messages import user_message
from estimator.result import Estimate
from estimator_app import chart, form, gpus, posting, tables

logger = logging.getLogger("estimator_app")

EXAMPLES = (
    "openai-community/gpt2",
    "Qwen/Qwen2.5-7B",
    "mistralai/Mixtral-8x7B-v0.1",
    "google-bert/bert-base-cased",
    "timm/resnet50.a1_in1k",
)
OAUTH = bool(os.environ.get("OAUTH_CLIENT_ID"))  # set on a Space whose front matter has hf_oauth: true
N_OUTPUTS = 12
# Two lanes: up to WORKERS requests run at once, but only BUILDERS of them may build a model the
# core has not answered before; repeats (answered from the core's cache by commit) never wait
# behind a heavy build. The queue is bounded: past QUEUE_SIZE waiting requests, Gradio says busy.
WORKERS = int(os.environ.get("ESTIMATOR_APP_WORKERS", "8"))
BUILDERS = int(os.environ.get("ESTIMATOR_APP_BUILDERS") or max(1, (os.cpu_count() or 2) - 1))  # a core left for repeats
QUEUE_SIZE = int(os.environ.get("ESTIMATOR_APP_QUEUE_SIZE", "64"))
_BUILDERS = threading.BoundedSemaphore(BUILDERS)
_ANSWERED: OrderedDict[tuple[Any, ...], None] = OrderedDict()  # request keys answered before; never a token
_ANSWERED_LOCK = threading.Lock()
DOWNLOADS = Path(tempfile.gettempdir()) / "estimator_app"
LINK_JS = """(query) => {
  if (!query) { return ""; }
  const url = window.location.origin + window.location.pathname + "?" + query;
  try { window.history.replaceState(null, "", url); } catch (e) {}
  return url;
}"""
CSS = """
#notices { border-left: 4px solid #f59e0b; padding-left: .75rem; }
.example-row button { flex: 0 1 auto !important; min-width: 0 !important; }
"""


def _run(state: form.FormState, progress: gr.Progress, token: str | None = None) -> tuple[Any, ...]:
    """Estimate ``state`` and render every output; any failure becomes a friendly ``gr.Error``."""
    key = (state.model, state.revision, tuple(sorted((k, str(v)) for k, v in state.estimate_kwargs().items())))
    with _ANSWERED_LOCK:
        repeat = key in _ANSWERED
    progress(0.05, desc=f"Reading {state.model} from the Hub")
    try:
        if repeat:
            result = _estimate(state, token)
        else:
            with _BUILDERS:
                progress(0.1, desc=f"Estimating {state.model}")
                result = _estimate(state, token)
            with _ANSWERED_LOCK:
                _ANSWERED[key] = None
                while len(_ANSWERED) > 4096:
                    _ANSWERED.popitem(last=False)
    except Exception as exc:
        message, status = user_message(exc)
        if status == 1:
            logger.exception("estimate failed for %s", state.model)
        else:
            logger.info("refused %s: %s", state.model, message)
        raise gr.Error(message, title="Could not estimate", print_exception=False) from None
    progress(0.9, desc="Rendering")
    summary, table, csv_path, json_path, frame, title, fits, caption, note = _rendered(result, state.gpu)
    # Plain values, not component instances: an update object makes Gradio rebuild the component's
    # whole config (a JSON schema) on every answer, which was most of the server's time per request.
    return (
        gr.Column(visible=True),
        summary,
        table,
        csv_path,
        json_path,
        form.to_query(_pinned(state, result.revision)),
        f"**{title}**",
        frame,
        fits,
        caption,
        note,
        result,
    )


_RENDERED: OrderedDict[tuple[str, str | None], tuple[Any, ...]] = OrderedDict()


def _rendered(result: Estimate, gpu: str | None) -> tuple[Any, ...]:
    """Every rendering of ``result`` (values only; Gradio copies what it sends), kept for repeats."""
    key = (tables.result_key(result), gpu)
    with _ANSWERED_LOCK:
        if key in _RENDERED:
            _RENDERED.move_to_end(key)
            return _RENDERED[key]
    csv_path, json_path = tables.write_downloads(result, _downloads() / key[0])
    frame = chart.chart_frame(result)
    rendered = (
        tables.summary(result),
        tables.results_frame(result),
        str(csv_path),
        str(json_path),
        frame,
        chart.chart_title(result),
        gpus.fits_frame(result, gpu),
        gpus.fits_caption(result.mode),
        tables.method_note(result),
    )
    with _ANSWERED_LOCK:
        _RENDERED[key] = rendered
        while len(_RENDERED) > 256:
            _RENDERED.popitem(last=False)
    return rendered


def _estimate(state: form.FormState, token: str | None) -> Estimate:
    return estimate(state.model, **state.estimate_kwargs(), token=token or None, trust_remote_code=False, cross_check=True)


def _pinned(state: form.FormState, revision: str | None) -> form.FormState:
    """The link pins the commit that was estimated, so it reproduces this very result."""
    from dataclasses import replace

    return replace(state, revision=revision) if revision and len(revision) == 40 else state


def _downloads() -> Path:
    DOWNLOADS.mkdir(parents=True, exist_ok=True)
    return DOWNLOADS


def _state(*values: Any) -> form.FormState:
    try:
        return form.from_form(*values)
    except ValueError as exc:
        raise gr.Error(str(exc), title="Check the form", print_exception=False) from None


def run_form(*values: Any, progress: gr.Progress = gr.Progress()) -> tuple[Any, ...]:  # noqa: B008 - Gradio's idiom
    *fields, token = values
    return _run(_state(*fields), progress, token)


def run_on_load(autorun: bool, *values: Any, progress: gr.Progress = gr.Progress()) -> tuple[Any, ...]:  # noqa: B008
    """After a share link filled the form: run it, with no click. Without a model, change nothing."""
    if not autorun:
        return tuple(gr.skip() for _ in range(N_OUTPUTS))
    return run_form(*values, progress=progress)


def load_link(request: gr.Request) -> tuple[Any, ...]:
    """Fill the form from the page URL's query parameters; show a notice for each one ignored."""
    raw: Any = getattr(request, "query_params", None) if request is not None else None
    params = list(raw.multi_items()) if hasattr(raw, "multi_items") else list(dict(raw or {}).items())
    parsed = form.from_query(params)
    s = parsed.state
    notice = ""
    if parsed.notices:
        notice = "**Some link parameters were ignored:**\n" + "\n".join(f"- {n}" for n in parsed.notices)
    return (
        s.model,
        s.revision,
        s.library,
        list(s.dtypes),
        s.mode,
        s.batch,
        s.seq or 0,
        s.image or 0,
        s.new_tokens,
        s.device,
        s.optimizer,
        s.pure16,
        s.checkpointing,
        s.lora or 0,
        s.gpu or "none",
        gr.Markdown(notice, visible=bool(notice)),
        bool(s.model) and parsed.given,
    )


def _post_token(typed: str | None, oauth_token: gr.OAuthToken | None) -> str | None:
    """The visitor's own token: the OAuth login's on a Space, else the one they typed. Never the server's."""
    if oauth_token is not None and getattr(oauth_token, "token", None):
        return str(oauth_token.token)
    return (typed or "").strip() or None


def _existing_note(existing: posting.Existing) -> str:
    return f"This model already has this discussion: [#{existing.num}]({existing.url}). Add to it there rather than opening a duplicate."


def preview_post(last: Estimate | None, link: str, typed: str | None, oauth_token: gr.OAuthToken | None = None) -> tuple[str, str]:
    """The body that would be posted, and whether the repo already has a discussion with our title."""
    if last is None:
        raise gr.Error("Estimate a model first; then its result can be posted.", title="Nothing to post", print_exception=False)
    try:
        repo = posting.repo_id(last)
        existing = posting.find_existing(repo, posting.title(last), token=_post_token(typed, oauth_token))
    except posting.PostingError as exc:
        raise gr.Error(exc.message, title="Cannot post", print_exception=False) from None
    preview = f"**{posting.title(last)}** (on {repo})\n\n" + posting.body(last, link)
    status = _existing_note(existing) if existing else f"No discussion with this title on {repo} yet. Post it when it reads right."
    return preview, status


def post_result(last: Estimate | None, link: str, typed: str | None, oauth_token: gr.OAuthToken | None = None) -> str:
    """Post with the visitor's token, unless the discussion exists; return a Markdown link to it."""
    if last is None:
        raise gr.Error("Estimate a model first; then its result can be posted.", title="Nothing to post", print_exception=False)
    token = _post_token(typed, oauth_token)
    try:
        repo = posting.repo_id(last)
        title = posting.title(last)
        existing = posting.find_existing(repo, title, token=token)
        if existing:
            return _existing_note(existing)
        url = posting.post(repo, title, posting.body(last, link), token=token or "")
    except posting.PostingError as exc:
        raise gr.Error(exc.message, title="Could not post", print_exception=False) from None
    return f"Posted: [{url}]({url})"


def build() -> gr.Blocks:
    with gr.Blocks(title="Model Memory Estimator", delete_cache=(3600, 3600)) as demo:
        gr.Markdown(
            "# Model Memory Estimator\n"
            "How much memory a Hugging Face model needs, per dtype, without downloading its weights: "
            "the model is built on PyTorch's meta device or read from its safetensors headers."
        )
        notices = gr.Markdown(visible=False, elem_id="notices")
        with gr.Row(equal_height=True):
            model = gr.Textbox(label="Model id or Hub URL", placeholder="openai-community/gpt2", scale=4, elem_id="model")
            revision = gr.Textbox(label="Revision", value="main", scale=1, min_width=120, elem_id="revision")
            library = gr.Dropdown(list(form.LIBRARIES), value="auto", label="Library", scale=1, min_width=160, elem_id="library")
        with gr.Row(elem_classes="example-row"):
            example_buttons = [gr.Button(name, size="sm", variant="secondary", elem_classes="example") for name in EXAMPLES]
        dtypes = gr.CheckboxGroup(list(form.DTYPES), value=list(form.FormState().dtypes), label="dtypes", elem_id="dtypes")
        with gr.Accordion("Advanced", open=False, elem_id="advanced"):
            with gr.Row():
                mode = gr.Radio(list(form.MODES), value="load", label="Mode", info="inference and training arrive with the peak simulator")
                device = gr.Radio(list(form.DEVICES), value="cuda", label="Target device")
                gpu = gr.Dropdown(["none", *gpus.GPU_NAMES], value="none", label="Your GPU (listed first in 'fits on')")
            with gr.Row():
                batch = gr.Number(1, label="Batch size", minimum=1, precision=0)
                seq = gr.Number(0, label="Sequence length (0 = default)", minimum=0, precision=0)
                image = gr.Number(0, label="Image size (0 = from the config)", minimum=0, precision=0)
                new_tokens = gr.Number(0, label="New tokens (inference)", minimum=0, precision=0)
            with gr.Row():
                optimizer = gr.Dropdown(list(form.OPTIMIZERS), value="adamw", label="Optimizer (training)")
                pure16 = gr.Checkbox(False, label="Pure 16-bit (training)")
                checkpointing = gr.Checkbox(False, label="Gradient checkpointing (training)")
                lora = gr.Number(0, label="LoRA rank (0 = full fine-tuning)", minimum=0, precision=0)
            token = gr.Textbox(label="Hub token for gated or private models (optional; never stored)", type="password", elem_id="token")
        go = gr.Button("Estimate memory", variant="primary", elem_id="go")

        with gr.Column(visible=False, elem_id="result-area") as result_area:
            summary = gr.Markdown(elem_id="summary")
            results = gr.DataFrame(label="Memory per dtype", interactive=False, wrap=True, elem_id="results")
            with gr.Row():
                csv_button = gr.DownloadButton("Exact bytes (CSV)", size="sm", elem_id="csv")
                json_button = gr.DownloadButton("Exact bytes (JSON)", size="sm", elem_id="json")
            query = gr.Textbox(visible=False)
            link = gr.Textbox(label="Share link (opens this result)", interactive=False, buttons=["copy"], elem_id="share-link")
            chart_title = gr.Markdown(elem_id="chart-title")
            plot = gr.BarPlot(
                x="bar",
                y="GiB",
                color="part",
                color_map=chart.COLORS,
                show_label=False,
                x_title="dtype",
                y_title="GiB",
                x_label_angle=-30,
                sort=chart.BAR_ORDER,
                elem_id="chart",
            )
            fits = gr.DataFrame(label="Fits on", interactive=False, wrap=True, elem_id="fits")
            fits_note = gr.Markdown()
            method = gr.Markdown(elem_id="method")
            last = gr.State(None)
            with gr.Accordion("Post this result to the model's Hub discussions", open=False, elem_id="post"):
                gr.Markdown(
                    "The post is made with **your** Hugging Face account"
                    + (
                        ": sign in below."
                        if OAUTH
                        else ": paste a token with the write-discussions permission (it is used for this post only, never stored)."
                    )
                )
                if OAUTH:
                    gr.LoginButton()
                post_token = gr.Textbox(
                    label="Your Hub token (write-discussions)", type="password", visible=not OAUTH, elem_id="post-token"
                )
                with gr.Row():
                    preview_button = gr.Button("Preview", elem_id="post-preview-button")
                    post_button = gr.Button("Post", variant="primary", elem_id="post-button")
                post_status = gr.Markdown(elem_id="post-status")
                post_preview = gr.Markdown(elem_id="post-preview")
        preview_button.click(preview_post, inputs=[last, link, post_token], outputs=[post_preview, post_status], api_visibility="private")
        post_button.click(
            post_result,
            inputs=[last, link, post_token],
            outputs=[post_status],
            concurrency_id="post",
            concurrency_limit=1,
            api_visibility="private",
        )

        fields = [
            model,
            revision,
            library,
            dtypes,
            mode,
            batch,
            seq,
            image,
            new_tokens,
            device,
            optimizer,
            pure16,
            checkpointing,
            lora,
            gpu,
        ]
        outputs = [result_area, summary, results, csv_button, json_button, query, chart_title, plot, fits, fits_note, method, last]
        autorun = gr.State(False)

        def show_link(event: Any) -> None:
            event.then(None, inputs=[query], outputs=[link], js=LINK_JS)

        run: dict[str, Any] = {"fn": run_form, "inputs": [*fields, token], "outputs": outputs, "concurrency_id": "estimate"}
        show_link(go.click(**run, api_name="estimate"))
        show_link(model.submit(**run, api_visibility="private"))
        for button, name in zip(example_buttons, EXAMPLES, strict=True):
            chosen = button.click(lambda n=name: n, outputs=[model], queue=False, api_visibility="private")
            show_link(chosen.then(**run, api_visibility="private"))
        loaded = demo.load(load_link, outputs=[*fields, notices, autorun], queue=False, api_visibility="private")
        show_link(
            loaded.then(run_on_load, inputs=[autorun, *fields, token], outputs=outputs, concurrency_id="estimate", api_visibility="private")
        )
    return demo


demo = build()
demo.queue(default_concurrency_limit=WORKERS, max_size=QUEUE_SIZE)

if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    demo.launch(css=CSS)
