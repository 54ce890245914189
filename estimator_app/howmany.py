""""How many GPUs do I need?": the form's request counted by :func:`estimator.gpu_count.count_gpus`, and its answer in words.

The count asks the core for the same request at 1, 2, 4, 8... GPUs of the kind chosen (the form's
strategy for fine-tuning, else fsdp; tensor parallelism to run or serve), so the single-GPU answer
just shown comes from the core's cache. Pure apart from that call (no Gradio).
"""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING

from estimator.gpu_count import count_gpus
from estimator_app import form
from estimator_app.fields import short_label
from estimator_app.lanes import lanes
from estimator_app.wording import PAGE

if TYPE_CHECKING:
    from estimator.fit.count import GPUCount

VARIED = ("gpus", "nodes", "strategy", "tensor_parallel_size", "pipeline_parallel_size", "gpu", "gpu_memory", "mode", "revision")
NEEDS = (f"To count GPUs, choose “{short_label('gpu')}” (or type its memory under Advanced) and, in “{short_label('mode')}”, "
         "run it, fine-tune it or serve it (loading counts no activations), with the target device cuda.")


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


def sentence(dtype: str, found: GPUCount) -> str:
    """One dtype's answer in words (the core's :meth:`~estimator.fit.count.GPUCount.sentence`)."""
    return found.sentence(dtype)


def count_html(counts: dict[str, GPUCount]) -> str:
    """The answer, one line per dtype row."""
    items = "".join(f"<li>{escape(sentence(dtype, found))}</li>" for dtype, found in counts.items())
    return f'<div class="mme-count" role="status"><strong>How many GPUs:</strong><ul>{items}</ul></div>'
