"""The contract between the engine and the input providers: what a workload is and the few facts both ask of a model.

:class:`Workload` (what to feed the model and how to run it) of a :class:`ModelKind`; :func:`accepts` (does the
forward take an argument), :func:`model_dtype` (the dtype of its floating-point parameters), :func:`first_tensor`,
:func:`forward_all` (a workload that feeds every input by name) and :class:`StepRefusedError` (a step the
simulation refuses in one line rather than answering by the formula). Imports nothing else of :mod:`estimator.peak`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

import torch
from torch import nn

from estimator.errors import UnsupportedError

__all__ = ["ModelKind", "StepRefusedError", "Workload", "accepts", "first_tensor", "forward_all", "model_dtype"]


class ModelKind(str, Enum):
    CAUSAL_LM = "causal_lm"
    MASKED_LM = "masked_lm"
    SEQ2SEQ_LM = "seq2seq_lm"
    SEQUENCE_CLASSIFICATION = "sequence_classification"
    IMAGE_CLASSIFICATION = "image_classification"
    TIMM_IMAGE = "timm_image"
    TEXT_BASE = "text_base"
    VISION_BASE = "vision_base"
    MODULE = "module"  # any nn.Module, fed positional inputs of given sizes


@dataclass(frozen=True)
class Workload:
    """What to feed the model and how to run it: ``make_inputs()`` (called inside the fake mode),
    ``train_loss(model, inputs)`` to a scalar loss and ``infer(model, inputs)`` to the output."""

    kind: ModelKind
    make_inputs: Callable[[], dict[str, torch.Tensor]]
    train_loss: Callable[[nn.Module, dict[str, torch.Tensor]], torch.Tensor]
    infer: Callable[[nn.Module, dict[str, torch.Tensor]], Any]
    description: str
    # entered around the whole step, above the tracker (known input values: estimator.peak.fakes.known_values)
    context: Callable[[], Any] | None = None
    # training: run the first step in full (not as zero gradients + optimizer step), because the loss leaves some
    # parameters without a gradient and AdamW keeps no state for them (SAM's unused FPN level and mask-prompt encoder)
    full_first_step: bool = False
    # training: the optimizer holds state for every trainable parameter even where this step's backward leaves some
    # without a gradient (the experts no token reaches under the routing assumption of estimator.peak.inputs.routing: in a
    # real run every expert gets tokens in time), so the first step is not cut to the parameters the backward reached
    states_for_all: bool = False


def first_tensor(out: Any) -> torch.Tensor:
    if isinstance(out, torch.Tensor):
        return out
    if hasattr(out, "to_tuple"):
        out = out.to_tuple()
    for item in out:
        if isinstance(item, torch.Tensor):
            return item
    raise ValueError("the model returned no tensor")


def accepts(model: nn.Module, arg: str) -> bool:
    """Whether ``model``'s forward takes an argument named ``arg``."""
    try:
        return arg in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False


def model_dtype(model: nn.Module, default: torch.dtype = torch.float32) -> torch.dtype:
    """The dtype of the model's first floating-point parameter (the dtype it was built in), else ``default``."""
    return next((p.dtype for p in model.parameters() if p.is_floating_point()), default)


class StepRefusedError(UnsupportedError):
    """A step the simulation refuses in one line (the engine re-raises it rather than answering by the formula)."""


def forward_all(kind: ModelKind, make_inputs: Callable[[], dict[str, torch.Tensor]], description: str,
                context: Callable[[], Any] | None) -> Workload:
    """A workload that feeds every input by name; training backpropagates the sum of the first output."""

    def train_loss(m: nn.Module, x: dict[str, torch.Tensor]) -> torch.Tensor:
        return first_tensor(m(**x)).sum()

    def infer(m: nn.Module, x: dict[str, torch.Tensor]) -> Any:
        return m(**x)

    return Workload(kind, make_inputs, train_loss, infer, description, context=context)
