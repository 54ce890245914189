""""How many GPUs do I need?": the form's request counted by :func:`estimator.gpu_count.count_gpus`, and its answer in words.

The count asks the core for the same request at 1, 2, 4, 8... GPUs of the kind chosen (the form's
strategy for fine-tuning, else fsdp; tensor parallelism to run or serve), so the single-GPU answer
just shown comes from the core's cache. Pure apart from that call (no Gradio).
"""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING

from estimator.gpu_count import count_gpus
from estimator.units import format_bytes
from estimator_app import form
from estimator_app.fields import short_label
from estimator_app.lanes import lanes
from estimator_app.wording import PAGE

if TYPE_CHECKING:
    from estimator.fit.count import GPUCount, Trial

VARIED = ("gpus", "nodes", "strategy", "tensor_parallel_size", "pipeline_parallel_size", "gpu", "gpu_memory", "mode", "revision")
NEEDS = (f"To count GPUs, choose {short_label('gpu')!r} (or type its memory under Advanced) and what to do: run it, fine-tune it or "
         "serve it (loading counts no activations).")


def count(state: form.FormState, token: str | None) -> dict[str, GPUCount]:
    """Per dtype, the fewest GPUs of the form's kind that fit its request (``ValueError`` in page words when it cannot be asked)."""
    if state.mode not in ("training", "inference", "serving") or state.device == "cpu" or not (state.gpu or state.gpu_memory):
        raise ValueError(NEEDS)
    kwargs = state.estimate_kwargs()
    ref = form.hub_reference(state.model, kwargs["revision"])
    options = {k: v for k, v in kwargs.items() if k not in VARIED}
    strategy = state.strategy if state.mode == "training" and state.strategy != "none" else None

    def work() -> dict[str, GPUCount]:
        # cross_check and no remote code as the page's single answer asks, so its 1-GPU estimate is the core's cached one
        return count_gpus(ref, mode=state.mode, strategy=strategy, gpu=None if state.gpu_memory else state.gpu, gpu_memory=state.gpu_memory,
                          revision=kwargs["revision"], token=token or None, trust_remote_code=False, cross_check=True,
                          wording=PAGE, **options)

    return lanes().run(("count", state.model, tuple(sorted((k, str(v)) for k, v in kwargs.items()))), work)


def _per_gpu(trial: Trial, n: int) -> str:
    if trial.details.get("kv_cache_tokens") is not None:  # serving: vLLM's plan per GPU
        tokens, concurrency, length = (trial.details.get(k) for k in ("kv_cache_tokens", "max_concurrency", "max_model_len"))
        return (f"{tokens:,} tokens of KV cache per GPU (× {n}), {concurrency:,.2f} requests of {length:,} tokens at once"
                if isinstance(tokens, int) and isinstance(concurrency, (int, float)) and isinstance(length, int) else "vLLM starts")
    if trial.needed_bytes is None:
        return trial.reason or "no figure"
    return f"{format_bytes(trial.needed_bytes)} per GPU (× {n}) of {format_bytes(trial.capacity_bytes)}"


def sentence(dtype: str, found: GPUCount) -> str:
    """One dtype's answer: ``"bfloat16: 4 × RTX 4090 (fsdp over 4 GPUs): 20.1 GiB per GPU (× 4) of 23.5 GiB; 2 do not fit (30.2 GiB)"``."""
    answer = found.answer
    if answer is None:
        last = found.trials[-1]
        return (f"{dtype}: no count up to {last.gpus} {found.gpu} fits ({last.layout}: {_per_gpu(last, last.gpus)})"
                + (f". {found.note}" if found.note and "DDP" in found.note else "") + ".")
    text = f"{dtype}: {answer.gpus} × {found.gpu} ({answer.layout}): {_per_gpu(answer, answer.gpus)}"
    below = found.below
    if below is not None:
        shown = format_bytes(below.needed_bytes) if below.needed_bytes is not None else (below.reason or "vLLM does not start")
        text += f"; {below.gpus} {'does' if below.gpus == 1 else 'do'} not fit ({shown})"
    method = answer.details.get("method")
    if method and method != "simulated":
        text += f" [method {method}: not simulated, see the notes]"
    return text + "."


def count_html(counts: dict[str, GPUCount]) -> str:
    """The answer, one line per dtype row."""
    items = "".join(f"<li>{escape(sentence(dtype, found))}</li>" for dtype, found in counts.items())
    return f'<div class="mme-count" role="status"><strong>How many GPUs:</strong><ul>{items}</ul></div>'
