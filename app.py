"""The Space page: type a Hub model id, get the memory it needs per dtype.

``python app.py`` serves it (``GRADIO_SERVER_PORT`` / ``GRADIO_SERVER_NAME`` as for any Gradio
app, ``HF_ENDPOINT`` as for any Hub client). This module is layout and wiring only: the handlers,
admission lanes, caches, posting and error wording are in :mod:`estimator_app`. Importing it
builds nothing; :func:`build` (or the ``demo`` attribute, built on first access, as Gradio's
reloader and Spaces look for it) makes the page. The app never sets ``trust_remote_code`` and
never sends the server's own Hub token.
"""

from __future__ import annotations

import estimator_app.environment  # noqa: F401  - first: settings read when huggingface_hub is imported

# isort: split
import functools
import logging
import os
from typing import Any

import gradio as gr

from estimator.fit.gpus import GPU_NAMES
from estimator_app import chart, form, handlers
from estimator_app.fields import FIELDS, LABELS
from estimator_app.lanes import Settings

EXAMPLES = ("openai-community/gpt2", "Qwen/Qwen2.5-7B", "mistralai/Mixtral-8x7B-v0.1", "google-bert/bert-base-cased", "timm/resnet50.a1_in1k")
LINK_JS = """(query) => {
  if (!query) { return ""; }
  const url = window.location.origin + window.location.pathname + "?" + query;
  try { window.history.replaceState(null, "", url); } catch (e) {}
  return url;
}"""
CSS = "#notices { border-left: 4px solid #f59e0b; padding-left: .75rem; }\n.example-row button { flex: 0 1 auto !important; min-width: 0 !important; }\n"
INTRO = (
    "# Model Memory Estimator\nHow much memory a Hugging Face model needs, per dtype, without downloading its weights: "
    "the model is built on PyTorch's meta device or read from its safetensors headers."
)


def _form(w: dict[str, Any]) -> list[gr.Button]:
    """The form's widgets into ``w`` (keyed as :data:`~estimator_app.fields.FIELDS`); returns the example buttons."""
    with gr.Row(equal_height=True):
        w["model"] = gr.Textbox(label=LABELS["model"], placeholder=EXAMPLES[0], scale=4, elem_id="model")
        w["revision"] = gr.Textbox(label=LABELS["revision"], value="main", scale=1, min_width=120, elem_id="revision")
        w["library"] = gr.Dropdown(list(form.LIBRARIES), value="auto", label=LABELS["library"], scale=1, min_width=160, elem_id="library")
    with gr.Row(elem_classes="example-row"):
        examples = [gr.Button(name, size="sm", variant="secondary", elem_classes="example") for name in EXAMPLES]
    w["dtypes"] = gr.CheckboxGroup(list(form.DTYPES), value=list(form.FormState().dtypes), label=LABELS["dtypes"], elem_id="dtypes")
    with gr.Accordion("Advanced", open=False, elem_id="advanced"):
        with gr.Row():
            w["mode"] = gr.Radio(list(form.MODES), value="load", label=LABELS["mode"], info="load: the weights; inference and training: the simulated peak of one step")
            w["device"] = gr.Radio(list(form.DEVICES), value="cuda", label=LABELS["device"])
            w["gpu"] = gr.Dropdown(["none", *GPU_NAMES], value="none", label=LABELS["gpu"])
        with gr.Row():
            for name, value, least in (("batch", 1, 1), ("seq", 0, 0), ("image", 0, 0), ("new_tokens", 0, 0)):
                w[name] = gr.Number(value, label=LABELS[name], minimum=least, precision=0)
        with gr.Row():
            w["optimizer"] = gr.Dropdown(list(form.OPTIMIZERS), value="adamw", label=LABELS["optimizer"])
            w["lora"] = gr.Number(0, label=LABELS["lora"], minimum=0, precision=0)
            w["lora_targets"] = gr.Textbox("", label=LABELS["lora_targets"], placeholder="q_proj,v_proj", max_lines=1, scale=2,
                                           elem_id="lora-targets")
        with gr.Row():  # a row of their own: beside the fields above a phone clips their labels
            w["pure16"] = gr.Checkbox(False, label=LABELS["pure16"])
            w["checkpointing"] = gr.Checkbox(False, label=LABELS["checkpointing"])
        w["token"] = gr.Textbox(label=LABELS["token"], type="password", elem_id="token")
    return examples


def _results(w: dict[str, Any], oauth: bool) -> None:
    """The result area (hidden until an answer) and the posting accordion, into ``w``."""
    with gr.Column(visible=False, elem_id="result-area") as w["result_area"]:
        w["summary"] = gr.Markdown(elem_id="summary")
        w["results"] = gr.DataFrame(label="Memory per dtype", interactive=False, wrap=True, elem_id="results")
        with gr.Row():
            w["csv"] = gr.DownloadButton("Exact bytes (CSV)", size="sm", elem_id="csv")
            w["json"] = gr.DownloadButton("Exact bytes (JSON)", size="sm", elem_id="json")
        w["query"] = gr.Textbox(visible=False)
        w["link"] = gr.Textbox(label="Share link (opens this result)", interactive=False, buttons=["copy"], elem_id="share-link")
        w["chart_title"] = gr.Markdown(elem_id="chart-title")
        w["plot"] = gr.BarPlot(x="bar", y="GiB", color="part", color_map=chart.COLORS, show_label=False, x_title="dtype", y_title="GiB",
                               x_label_angle=-30, sort=chart.BAR_ORDER, elem_id="chart")
        w["fits"] = gr.DataFrame(label="Fits on", interactive=False, wrap=True, elem_id="fits")
        w["fits_note"] = gr.Markdown()
        w["method"] = gr.Markdown(elem_id="method")
        w["last"] = gr.State(None)
        with gr.Accordion("Post this result to the model's Hub discussions", open=False, elem_id="post"):
            how = ": sign in below." if oauth else ": paste a token with the write-discussions permission (it is used for this post only, never stored)."
            gr.Markdown("The post is made with **your** Hugging Face account" + how)
            if oauth:
                gr.LoginButton()
            w["post_token"] = gr.Textbox(label=LABELS["post_token"], type="password", visible=not oauth, elem_id="post-token")
            with gr.Row():
                w["preview_button"] = gr.Button("Preview", elem_id="post-preview-button")
                w["post_button"] = gr.Button("Post", variant="primary", elem_id="post-button")
            w["post_status"] = gr.Markdown(elem_id="post-status")
            w["post_preview"] = gr.Markdown(elem_id="post-preview")


def build(oauth: bool | None = None) -> gr.Blocks:
    """The page, queued; ``oauth`` (default: ``OAUTH_CLIENT_ID`` is set, as on a Space with ``hf_oauth: true``) shows Sign in."""
    oauth = bool(os.environ.get("OAUTH_CLIENT_ID")) if oauth is None else oauth
    settings = Settings.from_env()
    w: dict[str, Any] = {}
    with gr.Blocks(title="Model Memory Estimator", delete_cache=(3600, 3600)) as demo:
        gr.Markdown(INTRO)
        notices = gr.Markdown(visible=False, elem_id="notices")
        examples = _form(w)
        go = gr.Button("Estimate memory", variant="primary", elem_id="go")
        _results(w, oauth)

        post_inputs = [w["last"], w["link"], w["post_token"]]
        w["preview_button"].click(handlers.preview_post, inputs=post_inputs, outputs=[w["post_preview"], w["post_status"]], api_visibility="private")
        w["post_button"].click(handlers.post_result, inputs=post_inputs, outputs=[w["post_status"]], concurrency_id="post", concurrency_limit=1,
                               api_visibility="private")
        fields = [w[name] for name in FIELDS]
        outputs = [w[name] for name in handlers.OUTPUTS]
        autorun = gr.State(False)

        def show_link(event: Any) -> None:
            event.then(None, inputs=[w["query"]], outputs=[w["link"]], js=LINK_JS)

        run: dict[str, Any] = {"fn": handlers.run_form, "inputs": [*fields, w["token"]], "outputs": outputs, "concurrency_id": "estimate"}
        show_link(go.click(**run, api_name="estimate"))
        show_link(w["model"].submit(**run, api_visibility="private"))
        for button, name in zip(examples, EXAMPLES, strict=True):
            chosen = button.click(lambda n=name: n, outputs=[w["model"]], queue=False, api_visibility="private")
            show_link(chosen.then(**run, api_visibility="private"))
        loaded = demo.load(handlers.load_link, outputs=[*fields, notices, autorun], queue=False, api_visibility="private")
        show_link(loaded.then(handlers.run_on_load, inputs=[autorun, *fields, w["token"]], outputs=outputs, concurrency_id="estimate",
                              api_visibility="private"))
    demo.queue(default_concurrency_limit=settings.workers, max_size=settings.queue_size)
    return demo


@functools.cache
def _demo() -> gr.Blocks:
    return build()


def __getattr__(name: str) -> Any:
    """``app.demo``: the page, built on first access (Gradio's reloader and Spaces look for it)."""
    if name == "demo":
        return _demo()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    _demo().launch(css=CSS)
