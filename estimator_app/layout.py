"""The page's widgets, laid out: the single-model form and its result area (wiring is in ``app.py``).

Each function puts its widgets into a dict keyed as :data:`~estimator_app.fields.FIELDS` (and the
result area's names, :data:`~estimator_app.handlers.OUTPUTS`), so ``app.py`` wires them by name.
"""

from __future__ import annotations

from typing import Any

import gradio as gr

from estimator.fit.gpus import GPU_NAMES
from estimator_app import form
from estimator_app.fields import LABELS, MODE_CHOICES
from estimator_app.style import SCROLL_CUE_JS

EXAMPLES = ("openai-community/gpt2", "Qwen/Qwen2.5-7B", "mistralai/Mixtral-8x7B-v0.1", "google-bert/bert-base-cased", "timm/resnet50.a1_in1k")
INTRO = (
    "# Model Memory Estimator\nHow much memory a Hugging Face model needs to load, run, fine-tune or serve, per dtype, and "
    "whether it fits your GPU, without downloading its weights: the model is built on PyTorch's meta device or read from "
    "its safetensors headers, and its own code runs on fake tensors."
)


def form_widgets(w: dict[str, Any]) -> list[gr.Button]:
    """The form's widgets into ``w`` (keyed as :data:`~estimator_app.fields.FIELDS`), the button (``w["go"]``) and the
    row of training fields (``w["training_row"]``, shown in mode training); returns the example buttons.

    The first screen asks the usual questions (:func:`first_screen`); every other field is under "Advanced"
    (:func:`advanced`), in sections. A new field goes into the section it belongs to; its place here does not
    change the share link (the link's order is :data:`~estimator_app.fields.FIELDS`).
    """
    examples = first_screen(w)
    w["go"] = gr.Button("Estimate memory", variant="primary", elem_id="go")
    with gr.Accordion("Advanced", open=False, elem_id="advanced"):
        advanced(w)
    return examples


def first_screen(w: dict[str, Any]) -> list[gr.Button]:
    """Model, examples, what to do, GPU, context, dtypes; LoRA and checkpointing when fine-tuning."""
    w["model"] = gr.Textbox(label=LABELS["model"], placeholder=EXAMPLES[0], elem_id="model")
    with gr.Row(elem_classes="example-row", elem_id="examples"):
        gr.HTML('<span class="mme-examples-label" id="examples-label">Examples:</span>', padding=False, container=False,
                elem_id="examples-label-box")
        examples = [gr.Button(name, size="sm", variant="secondary", elem_classes="example") for name in EXAMPLES]
    w["mode"] = gr.Radio([(label, value) for label, value in MODE_CHOICES], value="load", label=LABELS["mode"], elem_id="mode",
                         info="Load: the weights. Run and fine-tune: the simulated peak of one step. Serve: vLLM's plan (needs a GPU).")
    with gr.Row():
        w["gpu"] = gr.Dropdown(["none", *GPU_NAMES], value="none", label="Your GPU", info=_hint("gpu"), elem_id="gpu", min_width=200)
        w["seq"] = gr.Number(0, label="Context length (tokens)", info=_hint("seq"), minimum=0, precision=0, elem_id="seq", min_width=160)
    with gr.Row(visible=False, elem_id="training-row") as w["training_row"]:
        w["lora"] = gr.Number(0, label="LoRA rank", info=_hint("lora"), minimum=0, precision=0, elem_id="lora", min_width=160)
        w["checkpointing"] = gr.Checkbox(False, label="Gradient checkpointing", elem_id="checkpointing")
    w["dtypes"] = gr.CheckboxGroup(list(form.DTYPES), value=list(form.PAGE_DTYPES), label=LABELS["dtypes"], elem_id="dtypes",
                                   info="one row each; int8 and int4 are bitsandbytes' (with a LoRA rank, int4 is QLoRA)")
    return examples


def _hint(field: str) -> str:
    """The parenthesised hint of a field's label: ``"Context length (tokens...; 0 = 512)"`` -> ``"tokens...; 0 = 512"``."""
    label = LABELS[field]
    return label.split(" (", 1)[1].removesuffix(")") if " (" in label else ""


def advanced(w: dict[str, Any]) -> None:
    """Every other field, in sections: the model's source, the step's shape, training, GGUF, serving, several GPUs, the token."""
    with gr.Row():
        w["revision"] = gr.Textbox(label=LABELS["revision"], value="main", min_width=120, elem_id="revision")
        w["library"] = gr.Dropdown(list(form.LIBRARIES), value="auto", label=LABELS["library"], min_width=160, elem_id="library")
        w["device"] = gr.Radio(list(form.DEVICES), value="cuda", label=LABELS["device"], elem_id="device")
    with gr.Row():
        for name, value, least in (("batch", 1, 1), ("image", 0, 0), ("new_tokens", 0, 0)):
            w[name] = gr.Number(value, label=LABELS[name], minimum=least, precision=0, elem_id=name.replace("_", "-"))
    with gr.Row():  # what a vision-language or speech model's prompt carries (docs/multimodal.md)
        for name in ("images", "audio", "video"):
            w[name] = gr.Number(0, label=LABELS[name], minimum=0, precision=0, elem_id=name)
    with gr.Row():
        w["optimizer"] = gr.Dropdown(list(form.OPTIMIZERS), value="adamw", label=LABELS["optimizer"], elem_id="optimizer")
        w["lora_targets"] = gr.Textbox("", label=LABELS["lora_targets"], placeholder="q_proj,v_proj", max_lines=1, scale=2,
                                       elem_id="lora-targets")
    with gr.Row():  # a row of its own: beside the fields above a phone clips its label
        w["pure16"] = gr.Checkbox(False, label=LABELS["pure16"], elem_id="pure16")
    with gr.Row():
        w["gpu_memory"] = gr.Textbox("", label=LABELS["gpu_memory"], placeholder="24GiB", max_lines=1, elem_id="gpu-memory")
        w["attn"] = gr.Dropdown(list(form.ATTN_IMPLEMENTATIONS), value="auto", label=LABELS["attn"], elem_id="attn")
    with gr.Accordion("GGUF files (llama.cpp)", open=False, elem_id="gguf"):
        with gr.Row():
            w["gguf_file"] = gr.Textbox("", label=LABELS["gguf_file"], placeholder="Q4_K_M", max_lines=1, scale=2, elem_id="gguf-file")
            w["ctx"] = gr.Number(0, label=LABELS["ctx"], minimum=0, precision=0, elem_id="ctx")
        with gr.Row():
            w["cache_type"] = gr.Dropdown(list(form.CACHE_TYPES), value="f16", label=LABELS["cache_type"], elem_id="cache-type")
            w["n_gpu_layers"] = gr.Textbox("auto", label=LABELS["n_gpu_layers"], max_lines=1, elem_id="n-gpu-layers")
    with gr.Accordion("Serving (vLLM): What to do = Serve it, with your GPU", open=False, elem_id="serving"):
        with gr.Row():
            w["gpu_memory_utilization"] = gr.Number(0.9, label=LABELS["gpu_memory_utilization"], minimum=0.01, maximum=1,
                                                    step=0.05, elem_id="gpu-memory-utilization")
            w["max_model_len"] = gr.Number(0, label=LABELS["max_model_len"], minimum=0, precision=0, elem_id="max-model-len")
            w["kv_cache_dtype"] = gr.Dropdown(list(form.KV_CACHE_DTYPES), value="auto", label=LABELS["kv_cache_dtype"], elem_id="kv-cache-dtype")
        with gr.Row():
            w["max_num_seqs"] = gr.Number(0, label=LABELS["max_num_seqs"], minimum=0, precision=0, elem_id="max-num-seqs")
            w["max_num_batched_tokens"] = gr.Number(0, label=LABELS["max_num_batched_tokens"], minimum=0, precision=0,
                                                    elem_id="max-num-batched-tokens")
            w["block_size"] = gr.Number(16, label=LABELS["block_size"], minimum=1, precision=0, elem_id="block-size")
        with gr.Row():
            w["pipeline_parallel_size"] = gr.Number(1, label=LABELS["pipeline_parallel_size"], minimum=1, precision=0,
                                                    elem_id="pipeline-parallel-size")
            w["quantization"] = gr.Dropdown(list(form.SERVING_QUANTIZATIONS), value="none", label=LABELS["quantization"],
                                            elem_id="serving-quantization")
            w["vllm_version"] = gr.Dropdown(list(form.VLLM_VERSIONS), value=form.VLLM_VERSIONS[-1], label=LABELS["vllm_version"],
                                            elem_id="vllm-version")
    with gr.Accordion("Several GPUs (figures per GPU)", open=False, elem_id="parallel"):
        with gr.Row():
            w["tensor_parallel_size"] = gr.Number(1, label=LABELS["tensor_parallel_size"], minimum=1, precision=0,
                                                  elem_id="tensor-parallel-size")
        with gr.Row():
            w["strategy"] = gr.Dropdown(list(form.STRATEGY_CHOICES), value="none", label=LABELS["strategy"], elem_id="strategy")
            w["gpus"] = gr.Number(1, label=LABELS["gpus"], minimum=1, precision=0, elem_id="gpus")
            w["nodes"] = gr.Number(1, label=LABELS["nodes"], minimum=1, precision=0, elem_id="nodes")
            w["offload"] = gr.Dropdown(list(form.OFFLOADS), value="none", label=LABELS["offload"], elem_id="offload")
    w["token"] = gr.Textbox(label=LABELS["token"], type="password", elem_id="token")


def result_widgets(w: dict[str, Any], oauth: bool) -> None:
    """The result area (hidden until an answer) and the posting accordion, into ``w``."""
    with gr.Column(visible=False, elem_id="result-area") as w["result_area"]:
        w["summary"] = gr.HTML(elem_id="summary", js_on_load=None)
        with gr.Row(elem_id="count-row"):
            w["count_go"] = gr.Button("How many GPUs do I need?", size="sm", elem_id="count-go", scale=0, min_width=220)
        w["gpu_count"] = gr.HTML(elem_id="gpu-count", js_on_load=None)
        w["results"] = gr.HTML(elem_id="results", js_on_load=SCROLL_CUE_JS)
        with gr.Row():
            w["csv"] = gr.DownloadButton("Exact bytes (CSV)", size="sm", elem_id="csv")
            w["json"] = gr.DownloadButton("Exact bytes (JSON)", size="sm", elem_id="json")
        w["query"] = gr.Textbox(visible=False)
        # one line however long (a phone showed ~14 lines of parameters): the copy button takes it whole
        w["link"] = gr.Textbox(label="Share link (opens this result; copy it with the button)", interactive=False, buttons=["copy"], lines=1,
                               max_lines=1, elem_id="share-link")
        w["chart"] = gr.HTML(elem_id="chart", js_on_load=SCROLL_CUE_JS)
        w["fits"] = gr.HTML(elem_id="fits", js_on_load=SCROLL_CUE_JS)
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
