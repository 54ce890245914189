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

from estimator_app import fits_tab, handlers
from estimator_app.fields import FIELDS
from estimator_app.lanes import Settings
from estimator_app.layout import EXAMPLES, INTRO, form_widgets, result_widgets
from estimator_app.style import CSS

LINK_JS = """(query) => {
  if (!query) { return ""; }
  const url = window.location.origin + window.location.pathname + "?" + query;
  try { window.history.replaceState(null, "", url); } catch (e) {}
  return url;
}"""


def build(oauth: bool | None = None) -> gr.Blocks:
    """The page, queued; ``oauth`` (default: ``OAUTH_CLIENT_ID`` is set, as on a Space with ``hf_oauth: true``) shows Sign in."""
    oauth = bool(os.environ.get("OAUTH_CLIENT_ID")) if oauth is None else oauth
    settings = Settings.from_env()
    w: dict[str, Any] = {}
    with gr.Blocks(title="Model Memory Estimator", delete_cache=(3600, 3600)) as demo:
        gr.Markdown(INTRO)
        notices = gr.Markdown(visible=False, elem_id="notices")
        with gr.Tabs(selected="model", elem_id="tabs") as tabs:
            with gr.Tab("Estimate a model", id="model", elem_id="model-tab"):
                examples = form_widgets(w)
                go = w["go"]
                w["status"] = gr.HTML(elem_id="status", js_on_load=None)
                result_widgets(w, oauth)
            with gr.Tab("What fits my GPU?", id="fits", elem_id="fits-tab"):
                fits_tab.widgets(w)
        fits_tab.wire(w, demo, tabs)

        post_inputs = [w["last"], w["query"], w["post_token"]]
        w["preview_button"].click(handlers.preview_post, inputs=post_inputs, outputs=[w["post_preview"], w["post_status"]], api_visibility="private")
        w["post_button"].click(handlers.post_result, inputs=post_inputs, outputs=[w["post_status"], w["post_token"]], concurrency_id="post",
                               concurrency_limit=1, api_visibility="private")
        # the LoRA rank and checkpointing are on the first screen when fine-tuning (a link's mode too: .change)
        w["mode"].change(handlers.training_fields, inputs=[w["mode"]], outputs=[w["training_row"]], queue=False, api_visibility="private")
        fields = [w[name] for name in FIELDS]
        w["count_go"].click(handlers.count_form, inputs=[*fields, w["token"], w["last"]], outputs=[w["gpu_count"]], concurrency_id="estimate",
                            api_name="count_gpus")
        outputs = [w[name] for name in handlers.OUTPUTS]
        autorun = gr.State(False)

        def show_link(event: Any) -> None:
            shown = event.then(None, inputs=[w["query"]], outputs=[w["link"]], js=LINK_JS)
            shown.then(lambda: "", outputs=[w["gpu_count"]], queue=False, api_visibility="private")  # a count is for the result it was asked on

        run: dict[str, Any] = {"fn": handlers.run_form, "inputs": [*fields, w["token"], w["last"]], "outputs": outputs, "concurrency_id": "estimate"}
        show_link(go.click(**run, api_name="estimate"))
        show_link(w["model"].submit(**run, api_visibility="private"))
        for button, name in zip(examples, EXAMPLES, strict=True):
            chosen = button.click(lambda n=name: n, outputs=[w["model"]], queue=False, api_visibility="private")
            show_link(chosen.then(**run, api_visibility="private"))
        loaded = demo.load(handlers.load_link, outputs=[*fields, notices, autorun], queue=False, api_visibility="private")
        show_link(loaded.then(handlers.run_on_load, inputs=[autorun, *fields, w["token"], w["last"]], outputs=outputs, concurrency_id="estimate",
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
