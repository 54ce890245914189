"""The workload of a vision-language or speech model fed its processor's inputs (:mod:`estimator.peak.processors`).

- inference: ``generate``'s prefill: the model's own ``prepare_inputs_for_generation`` (first
  iteration: the images go in) on the prompt with its image tokens, a ``DynamicCache``, the all-ones
  mask and ``logits_to_keep=1``, then the model's forward; the decode steps are text only, as in
  ``generate`` (:func:`estimator.peak.steps.simulate_step` simulates the last one).
- training: a forward with ``labels`` = the prompt's ids (text and image tokens; the model masks
  nothing by itself, as a plain fine-tuning collator would pass them) to the model's own loss.

The integer inputs (ids, grids, tile ids, masks) are fakes whose real values are known to
:class:`~estimator.peak.known_values.KnownValues`, entered around the whole step, so the model's
questions about where the image tokens are get the real answers.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from estimator.peak.inputs import ModelKind, Workload, prefill_kwargs
from estimator.peak.known_values import KnownValues, know
from estimator.peak.processors import MediaInputs

__all__ = ["MediaWorkload", "media_workload"]


@dataclass(frozen=True)
class MediaWorkload(Workload):
    """A workload with a context the engine enters around the whole step, above the tracker."""

    context: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext


def media_workload(model: nn.Module, media: MediaInputs) -> Workload:
    """The workload of ``model`` on ``media`` (one batch of processor outputs); see the module docstring."""
    dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)

    def make_inputs() -> dict[str, torch.Tensor]:
        made: dict[str, torch.Tensor] = {}
        for name, real in media.tensors.items():
            if real.dtype.is_floating_point:
                made[name] = torch.empty(real.shape, dtype=dtype if real.dtype == torch.float32 else real.dtype)
            else:
                made[name] = know(torch.empty(real.shape, dtype=real.dtype), real)
        made["labels"] = know(torch.empty(media.tensors["input_ids"].shape, dtype=torch.long), media.tensors["input_ids"])
        return made

    def train_loss(m: nn.Module, x: dict[str, torch.Tensor]) -> torch.Tensor:
        return m(**x).loss

    def infer(m: nn.Module, x: dict[str, torch.Tensor]) -> Any:
        x = {k: v for k, v in x.items() if k != "labels"}
        ids = x.pop("input_ids")
        mask = torch.ones_like(ids)  # known, as the ids are (generate's all-ones mask: no padding)
        kwargs = prefill_kwargs(m)
        prepared = m.prepare_inputs_for_generation(ids, attention_mask=mask, is_first_iteration=True, **kwargs, **x)  # type: ignore[operator]
        return m(**prepared)

    return MediaWorkload(ModelKind.CAUSAL_LM, make_inputs, train_loss, infer, media.description, context=KnownValues)
