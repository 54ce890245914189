"""What the quantized truths share (:mod:`testkit.quant_truth`, :mod:`testkit.prequant_truth`,
:mod:`testkit.prequant_lora_truth`): the measured run of a checkpoint saved to a temporary folder and loaded inside
``torch.profiler``'s memory profile (:func:`checkpoint_peak`), the two works they time in its window (greedy
``generate``: :func:`generate_window`; LoRA training: :func:`lora_window`), and, for the simulated side, the case's
model built on meta in bfloat16 (:func:`meta_bf16`) and the answer's fields (:func:`answer`).

What the runs use is imported here, before any profile starts: an import inside the profiled region could leave
tensors it allocated in the measured total."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from typing import Any

import torch
from peft import LoraConfig, get_peft_model
from torch.profiler import ProfilerActivity, profile, record_function

from estimator.peak.inputs.providers import workload_for
from testkit.peak_cases import PeakCase
from testkit.training_truth import train_step
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


def generate_window(model: Any, case: PeakCase, new_tokens: int, work: str) -> None:
    """In eval mode, ``generate`` greedily from random ids (the case's batch and length) ``new_tokens`` tokens exactly
    (prefill and ``new_tokens`` decode steps), in the ``record_function(work)`` window."""
    model.eval()
    ids = torch.randint(0, model.config.vocab_size, (case.batch_size, case.seq_len))
    with record_function(work), torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                             min_new_tokens=new_tokens, do_sample=False, pad_token_id=0)
    assert out.shape[1] == case.seq_len + new_tokens
    del out, ids


def lora_window(model: Any, batch_size: int, seq_len: int, work: str, *, rank: int,
                targets: list[str] | None = None, prepare: Callable[[Any], Any] | None = None) -> None:
    """The workload's inputs (:func:`estimator.peak.inputs.providers.workload_for`) made first; then ``prepare(model)``
    when given (``prepare_model_for_kbit_training``), ``get_peft_model(LoraConfig(r=rank, target_modules=targets))``
    and, in the ``record_function(work)`` window, two steps of ``torch.optim.AdamW`` under
    ``torch.autocast("cpu", torch.bfloat16)`` (:func:`testkit.training_truth.train_step`)."""
    wl = workload_for(model, batch_size=batch_size, seq_len=seq_len)
    inputs = wl.make_inputs()
    if prepare is not None:
        model = prepare(model)
    model = get_peft_model(model, LoraConfig(r=rank, target_modules=targets))
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    with record_function(work):
        for _ in range(2):
            train_step(model, wl, inputs, opt, torch.bfloat16)
    del opt, model


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
