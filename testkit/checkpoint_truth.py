"""What the quantized truths share (:mod:`testkit.quant_truth`, :mod:`testkit.prequant_truth`,
:mod:`testkit.prequant_lora_truth`): the measured run of a checkpoint saved to a temporary folder and loaded inside
``torch.profiler``'s memory profile (:func:`checkpoint_peak`), and, for the simulated side, the case's model built on
meta in bfloat16 (:func:`meta_bf16`) and the answer's fields (:func:`answer`)."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

from testkit.peak_cases import PeakCase
from testkit.truth import trace_events, window_peak


def checkpoint_peak(write: Callable[[str], None], load: Callable[[str], Any], run: Callable[[Any], None],
                    work: str) -> dict[str, int]:
    """``write(folder)`` the checkpoint into a temporary folder before profiling; then, inside the profiled region,
    ``run(load(folder))``: the load is part of the profiled run, as in a user's script, and ``run`` does its work in
    a ``record_function(work)`` window. ``{"peak_bytes": the allocator's peak in that window}``."""
    with tempfile.TemporaryDirectory() as tmp:
        write(tmp)
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            run(load(tmp))
    return {"peak_bytes": window_peak(trace_events(prof), work)}


def meta_bf16(case: PeakCase) -> Any:
    """The case's model built on meta in bfloat16 from its config alone, as ``from_pretrained(dtype=torch.bfloat16)``
    builds it (rotary ``inv_freq`` stays float32)."""
    with torch.device("meta"):
        built = case.build()
        return type(built)._from_config(built.config, dtype=torch.bfloat16)  # type: ignore[attr-defined]  # a transformers model


def answer(result: Any) -> dict[str, Any]:
    """The fields of ``simulate_peak``'s result a truth module's ``simulate`` returns (JSON-ready)."""
    return {"peak_bytes": result.peak_bytes, "components": result.components, "method": result.method,
            "notes": list(result.notes)}
