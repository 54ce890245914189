"""Turn a model built on the meta device into one whose tensors are fake CPU tensors.

Building a model *inside* ``FakeTensorMode`` fails for some architectures (HF ViT's
``trunc_normal_`` init, timm ConvNeXt's drop-path rates computed from tensor values), while
building on ``meta`` always works; so the model is built on meta by the caller and materialised
here. Every parameter, buffer and plain tensor attribute on the meta device is replaced by a fake
tensor of the same shape, dtype and stride, on CPU. Tied weights stay tied: the same meta tensor
object maps to the same fake tensor.

``nn.Module.to_empty`` cannot be used: it swaps tensors in place, which fails for fake tensors.
"""

from __future__ import annotations

import logging

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

__all__ = ["materialize"]

logger = logging.getLogger(__name__)


def _fake_like(t: torch.Tensor, fake_mode: FakeTensorMode, device: str) -> torch.Tensor:
    with fake_mode:
        return torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device=device)


def _unmade(t: torch.Tensor) -> bool:
    """A parameter or buffer still to be made fake: on meta, or a real CPU tensor that the modeling
    code made outside the meta device (DiffLlama's ``nn.Parameter(torch.normal(0, std, size=...))``:
    ``torch.normal`` with float mean and std ignores the device context), which a fake forward
    could not mix with fakes and whose bytes the tracker would not see."""
    from torch._subclasses.fake_tensor import FakeTensor

    return t.is_meta or (not isinstance(t, FakeTensor) and t.device.type == "cpu")


def materialize(model: nn.Module, fake_mode: FakeTensorMode, device: str = "cpu") -> nn.Module:
    """Replace the model's meta tensors by fake tensors on ``device`` (CPU; or CUDA, which fake
    tensors can be without a GPU, for CUDA's own autocast), in place; return the model.

    Parameters keep their ``requires_grad``. Parameters and buffers left on the CPU by the build
    are made fake too, and so are plain floating tensor attributes the build left on the CPU
    (:func:`_plain_table`); tensors on another device are left alone.
    """
    memo: dict[int, torch.Tensor] = {}

    def convert(t: torch.Tensor) -> torch.Tensor:
        key = id(t)
        if key not in memo:
            fake = _fake_like(t, fake_mode, device)
            if isinstance(t, nn.Parameter):
                fake = nn.Parameter(fake, requires_grad=t.requires_grad)
            memo[key] = fake
        return memo[key]

    for module in model.modules():
        for name, p in list(module._parameters.items()):
            if p is not None and _unmade(p):
                module._parameters[name] = convert(p)  # type: ignore[assignment]  # a fake Parameter in place of the meta one; torch types the slot narrowly
        for name, b in list(module._buffers.items()):
            if b is not None and _unmade(b):
                module._buffers[name] = convert(b)
        for name, value in list(vars(module).items()):
            if not isinstance(value, torch.Tensor) or isinstance(value, nn.Parameter):
                continue
            if value.is_meta or _plain_table(value):
                setattr(module, name, convert(value))
    logger.debug("materialised %d meta tensors as fake tensors", len(memo))
    return model


def _plain_table(t: torch.Tensor) -> bool:
    """A real floating CPU tensor kept as a plain attribute (neither parameter nor buffer) that the build
    made off the meta device: VideoMAE's sinusoid position table (``torch.FloatTensor`` of a numpy
    table), which a fake forward cannot mix with fakes. Its values change no shape. Integer ones (indices
    a model may ``tolist()``) and 0-d constants, which fakes accept, are left as they are."""
    from torch._subclasses.fake_tensor import FakeTensor

    return not isinstance(t, FakeTensor) and t.device.type == "cpu" and t.dim() > 0 and t.is_floating_point()
