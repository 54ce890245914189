"""The "What fits my GPU?" tab: its widgets and handlers, over :mod:`estimator_app.whatfits` (the logic).

The dataset is read when the first question is asked (``ESTIMATOR_SWEEP_DATASET``, else the one
shipped with the app). Handlers never raise: a bad size or a missing dataset is one message above
the table. The tab's state travels in the page URL (:data:`estimator_app.whatfits.PARAMS`).
"""

from __future__ import annotations

import logging
from html import escape
from typing import Any

import gradio as gr

from estimator.fit.gpus import GPU_NAMES
from estimator_app import whatfits
from estimator_app.whatfits import USES, Query

logger = logging.getLogger("estimator_app")
INPUTS: tuple[str, ...] = whatfits.PARAMS  # the widgets, named and ordered as the tab's link parameters
OUTPUTS: tuple[str, ...] = ("fits_status", "fits_table", "fits_query")
DATATYPES: list[Any] = ["markdown", "number", "number", "number", "number", "number", "number", "number", "str", "str", "str"]
CHECKPOINTING = [("either", ""), ("without", "0"), ("with", "1")]  # gradient checkpointing (fine-tuning), as fits_checkpointing
WIDTHS: list[str | int] = [240, 96, 96, 104, 96, 96, 96, 104, 104, 128, 200]  # px: headers stay on one or two lines
USE_CHOICES = [(label, key) for key, label in USES.items()]
PARAMS_JS = """(query) => {
  if (!query) { return ""; }
  try { window.history.replaceState(null, "", window.location.pathname + "?" + query); } catch (e) {}
  return query;
}"""


def _sweep() -> whatfits.Sweep:
    return whatfits.load(whatfits.source_from_env())


def widgets(w: dict[str, Any]) -> None:
    """The tab's widgets into ``w`` (keyed as :data:`INPUTS` and :data:`OUTPUTS`)."""
    gr.Markdown("Which models fit a GPU, from a sweep of estimates made in advance (each figure says how it was obtained: "
                "`Method`). Click a model for its full answer.", elem_id="fits-intro")
    w["fits_source"] = gr.Markdown(elem_id="fits-source", elem_classes="fits-source")
    with gr.Row():
        w["fits_gpu"] = gr.Dropdown(list(GPU_NAMES), value="RTX 4090", label="GPU", elem_id="fits-gpu")
        w["fits_memory"] = gr.Textbox("", label="Or its memory (e.g. 24GiB)", placeholder="24GiB", max_lines=1, elem_id="fits-memory")
        w["fits_use"] = gr.Dropdown(USE_CHOICES, value="load", label="Use", elem_id="fits-use")
    with gr.Row():
        w["fits_dtype"] = gr.Dropdown(["bfloat16"], value="bfloat16", label="dtype", allow_custom_value=True, elem_id="fits-dtype")
        w["fits_scenario"] = gr.Dropdown([], value=None, label="Scenario (batch x tokens, as swept)", allow_custom_value=True,
                                         elem_id="fits-scenario")
        w["fits_filter"] = gr.Textbox("", label="Model name contains", max_lines=1, elem_id="fits-filter")
        w["fits_checkpointing"] = gr.Dropdown(CHECKPOINTING, value="", label="Gradient checkpointing (fine-tuning)",
                                              elem_id="fits-checkpointing")
    w["fits_go"] = gr.Button("Show models that fit", variant="primary", elem_id="fits-go")
    w["fits_status"] = gr.HTML(elem_id="fits-status")
    w["fits_table"] = gr.Dataframe(headers=list(whatfits.COLUMNS), datatype=DATATYPES, interactive=False,
                                   wrap=True, max_height=560, show_search="filter", pinned_columns=1, column_widths=WIDTHS,
                                   elem_id="fits-table")
    w["fits_query"] = gr.Textbox(visible=False)


def _checkpointing(value: str | None) -> bool | None:
    return None if not value else value == "1"


def dtype_choices(use: str, dtypes: list[str]) -> list[tuple[str, str]]:
    """The dtype dropdown's choices: int4 under LoRA is named for what it is, QLoRA."""
    return [(f"{d} (QLoRA)" if use == "lora" and d == "int4" else d, d) for d in dtypes]


def choices(use: str, dtype: str | None, scenario: str | None = None, checkpointing: str | None = None) -> tuple[Any, Any]:
    """The dtypes and scenarios swept for ``use`` (the dtype and scenario kept when they were swept; the scenarios with or
    without gradient checkpointing as asked)."""
    try:
        sweep = _sweep()
    except whatfits.DatasetError:
        return gr.skip(), gr.skip()
    dtypes = sweep.dtypes(use)
    dtype = dtype if dtype in dtypes else (dtypes[0] if dtypes else None)
    scenarios = sweep.scenarios(use, dtype, _checkpointing(checkpointing))
    scenario = scenario if scenario in scenarios else (scenarios[0] if scenarios else None)
    return gr.Dropdown(choices=dtype_choices(use, dtypes), value=dtype), gr.Dropdown(choices=scenarios, value=scenario)


def source() -> str:
    """Which dataset the tab shows (:meth:`~estimator_app.whatfits.Sweep.describe`), or why it cannot be read."""
    try:
        return _sweep().describe()
    except whatfits.DatasetError as exc:
        return f"**The dataset could not be read.** {exc}"


def show(gpu: str | None, memory: str | None, use: str, dtype: str | None, scenario: str | None, text: str | None,
         checkpointing: str | None = "") -> tuple[Any, ...]:
    """The table of models that fit, a line saying what it holds, and the tab's query string."""
    query = Query(gpu=gpu or None, memory=(memory or "").strip() or None, use=use or "load", dtype=dtype or "bfloat16",
                  scenario=scenario or None, filter=(text or "").strip()[:200], checkpointing=_checkpointing(checkpointing))
    try:
        found = whatfits.answer(_sweep(), query)
    except (ValueError, whatfits.DatasetError) as exc:
        return f'<div class="mme-error" role="alert">{escape(str(exc))}</div>', gr.skip(), ""
    except Exception:
        logger.exception("what-fits query failed: %r", query)
        return '<div class="mme-error" role="alert">Internal error; the server logged it.</div>', gr.skip(), ""
    # a plain DataFrame (its columns are the headers): serving's columns have the same types in the same places
    return f'<p class="fits-summary">{escape(found.summary)}</p>', found.table, whatfits.to_params(found.query)


def load_link(request: gr.Request) -> tuple[Any, ...]:
    """The tab's widgets from the page URL (:data:`~estimator_app.whatfits.PARAMS`), the tab to select, and whether to run."""
    raw: Any = getattr(request, "query_params", None) if request is not None else None
    params = dict(raw or {})
    query = whatfits.from_params(params)
    if query is None:
        return (*(gr.skip() for _ in INPUTS), gr.skip(), False)
    gpu = query.gpu if query.gpu in GPU_NAMES else gr.skip()
    use = query.use if query.use in USES else "load"
    checkpointing = "" if query.checkpointing is None else "1" if query.checkpointing else "0"
    return (gpu, query.memory or "", use, query.dtype, query.scenario, query.filter, checkpointing, gr.Tabs(selected="fits"), True)


def wire(w: dict[str, Any], demo: gr.Blocks, tabs: gr.Tabs) -> None:
    """The tab's events: choices follow the use, the button (API ``what_fits``) answers, a link with ``fits_*`` runs it."""
    inputs = [w[name] for name in INPUTS]
    outputs = [w[name] for name in OUTPUTS]
    for widget in (w["fits_use"], w["fits_dtype"], w["fits_checkpointing"]):
        widget.input(lambda use, dtype, cp: choices(use, dtype, None, cp), inputs=[w["fits_use"], w["fits_dtype"], w["fits_checkpointing"]],
                     outputs=[w["fits_dtype"], w["fits_scenario"]], queue=False, api_visibility="private")
    demo.load(source, outputs=[w["fits_source"]], queue=False, api_visibility="private")
    asked = w["fits_go"].click(show, inputs=inputs, outputs=outputs, api_name="what_fits", concurrency_id="fits")
    asked.then(None, inputs=[w["fits_query"]], outputs=[w["fits_query"]], js=PARAMS_JS)
    autorun = gr.State(False)
    loaded = demo.load(load_link, outputs=[*inputs, tabs, autorun], queue=False, api_visibility="private")
    filled = loaded.then(choices, inputs=[w["fits_use"], w["fits_dtype"], w["fits_scenario"], w["fits_checkpointing"]],
                         outputs=[w["fits_dtype"], w["fits_scenario"]], queue=False, api_visibility="private")
    filled.then(lambda run, *values: show(*values) if run else tuple(gr.skip() for _ in OUTPUTS), inputs=[autorun, *inputs], outputs=outputs,
                api_visibility="private")
