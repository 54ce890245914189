"""Workloads of models whose forward takes neither token ids nor an image batch.

- :func:`patch_tower_workload`: a Qwen-VL-style vision tower asked alone (the flattened patches a
  processor makes, and their ``grid_thw``);
- :func:`series_workload`: a time-series model's ``past_values``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from estimator.peak.fakes.known_values import KnownValues, know
from estimator.peak.workload import model_dtype

__all__ = ["Inputs", "patch_tower_inputs", "series_inputs"]

# what to feed and how to describe it; estimator.peak.inputs.providers makes the Workload (forward all of it,
# training backpropagates the sum of the first output)
Inputs = tuple[Callable[[], dict[str, torch.Tensor]], str, Callable[[], Any] | None]


def patch_tower_inputs(model: nn.Module, b: int, image_size: int | None, patches: str) -> Inputs:
    """A Qwen-VL-style vision tower asked alone (Qwen2.5-VL, Qwen3-VL, GLM-4V...): its forward takes the
    processor's flattened patches ``hidden_states`` (B * h * w, C * temporal_patch * patch^2) and
    ``grid_thw`` (B, 3) = (1, h, w) per image, h and w the patches per side of an ``image_size``
    image (the config's, else 224), cut to a multiple of ``spatial_merge_size``. The grid's values are
    known (:mod:`estimator.peak.fakes.known_values`): the tower loops over them."""

    config: Any = model.config
    patch = int(getattr(config, "patch_size", 14) or 14)
    merge = int(getattr(config, "spatial_merge_size", 1) or 1)
    size = int(image_size or getattr(config, "image_size", None) or 224)
    side = max(merge, size // patch // merge * merge)
    channels = int(getattr(config, "in_channels", None) or getattr(config, "num_channels", None) or 3)
    features = channels * int(getattr(config, "temporal_patch_size", 1) or 1) * patch**2
    dtype = model_dtype(model)

    def make_inputs() -> dict[str, torch.Tensor]:
        return {patches: torch.randn(b * side * side, features, dtype=dtype),
                "grid_thw": _known_tensor([[1, side, side]] * b)}

    return (make_inputs,
            f"the processor's flattened pixel_values patches of {b} image(s) of {side}x{side} patches: "
            f"{patches} {b * side * side}x{features}, grid_thw {b}x3", KnownValues)


def series_inputs(model: nn.Module, b: int) -> Inputs:
    """The inputs of a time-series model (PatchTST, PatchTSMixer, TimesFM 2.5): ``past_values`` of the config's
    ``context_length`` steps, (B, context_length, num_input_channels) where the config has channels,
    else (B, context_length)."""
    config: Any = model.config
    steps = int(config.context_length)
    channels = getattr(config, "num_input_channels", None)
    shape = (b, steps, int(channels)) if channels else (b, steps)
    dtype = model_dtype(model)

    def make_inputs() -> dict[str, torch.Tensor]:
        return {"past_values": torch.randn(shape, dtype=dtype)}

    return make_inputs, f"past_values {'x'.join(map(str, shape))}", None


def _known_tensor(values: list[list[int]]) -> torch.Tensor:
    """A small integer tensor whose values :class:`~estimator.peak.fakes.known_values.KnownValues` knows
    inside a fake mode (outside one: the real tensor)."""
    from torch.utils._python_dispatch import _disable_current_modes

    t = torch.tensor(values, dtype=torch.long)
    if not isinstance(t, torch._subclasses.fake_tensor.FakeTensor):
        return t
    with _disable_current_modes():
        real = torch.tensor(values, dtype=torch.long, device="cpu")
    return know(t, real)
