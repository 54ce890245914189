"""Measure the real peak of a case on CPU, in this (fresh) process, with ``torch.profiler``.

``python -m testkit.peak_truth CASE MODE`` prints one JSON line: ``peak_bytes``, the maximum
"Total Allocated" of the profiler's memory events while the work runs (inside a
``record_function`` window), and ``peak_bytes_with_build``, the maximum over the whole profile.
The model is built inside the profiled region, so its weights are in the allocator's total; the
window only leaves out transient tensors of the *random initialisation* (T5's init, for example,
briefly holds vocabulary-sized temporaries), which loading a checkpoint does not make and which
are not part of an inference or training step. Run it in a fresh process: the profiler's total
also counts tensors that earlier profiled code left alive.

The work is what the simulator simulates: training = two steps of forward with the model's loss,
backward, ``torch.optim.AdamW()`` with its defaults for CPU tensors, ``zero_grad(set_to_none=True)``;
inference = generate's prefill (``no_grad``, a ``DynamicCache``, ``logits_to_keep=1``) for
generative models, one ``no_grad`` forward for the others.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from testkit.truth import allocated_peak, trace_events, window_peak

_WORK = "peak_work"


def measure(case_name: str, mode: str) -> dict[str, int]:
    from testkit.peak_cases import CASES

    case = CASES[case_name]
    measured = measure_workload(lambda: case.build_on("cpu"), mode, batch_size=case.batch_size, seq_len=case.seq_len,
                                image_size=case.image_size)
    return {
        "peak_bytes": measured.peak_bytes,
        "peak_bytes_with_build": measured.peak_bytes_with_build,
    }


@dataclasses.dataclass(frozen=True)
class MeasuredWork:
    """What :func:`measure_workload` measured."""

    peak_bytes: int  # the allocator's peak inside the work's window
    peak_bytes_with_build: int  # and over the whole profile, the model's build and inputs included
    workload: Any  # the estimator.peak.inputs.providers.Workload that made the inputs (its description)


def measure_workload(build: Callable[[], Any], mode: str, **shape: Any) -> MeasuredWork:
    """The allocator's peak of ``mode`` (:func:`run_work`) on the real model: ``torch.manual_seed(0)``, then, inside
    one CPU memory profile, the model built by ``build()``, the inputs of ``workload_for(model, **shape)`` and the
    work in its own window. Call in a fresh process (see the module docstring)."""
    from estimator.peak.inputs.providers import workload_for

    torch.manual_seed(0)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        model = build()
        wl = workload_for(model, **shape)
        inputs = wl.make_inputs()
        with record_function(_WORK):
            run_work(model, wl, inputs, mode)
        del model, inputs
    events = trace_events(prof)
    return MeasuredWork(window_peak(events, _WORK), allocated_peak(events), wl)


def run_work(model: Any, wl: Any, inputs: dict[str, Any], mode: str) -> None:
    """The measured work: two AdamW steps (training) or one ``no_grad`` inference of the workload."""
    train_or_infer(model, inputs, mode, wl.train_loss, wl.infer)


def train_or_infer(model: Any, inputs: Any, mode: str, loss: Callable[[Any, Any], Any], infer: Callable[[Any, Any], Any],
                   *, lr: float = 1e-4) -> None:
    """The work every truth measures. Training (``mode == "training"``): the model in train mode, two steps of
    ``loss(model, inputs).backward()``, ``torch.optim.AdamW(lr=lr)``'s step and ``zero_grad(set_to_none=True)``,
    each loss dropped after its backward; otherwise the model in eval mode and one ``infer(model, inputs)`` under
    ``no_grad``, its output dropped at once."""
    if mode == "training":
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=lr)
        for _ in range(2):
            step_loss = loss(model, inputs)
            step_loss.backward()
            del step_loss
            opt.step()
            opt.zero_grad(set_to_none=True)
    else:
        model.eval()
        with torch.no_grad():
            out = infer(model, inputs)
        del out


if __name__ == "__main__":
    print(json.dumps(measure(sys.argv[1], sys.argv[2])))
