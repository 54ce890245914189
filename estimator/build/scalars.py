"""Integer scalars a model's ``__init__`` makes with ``torch.tensor``, kept on the CPU while the model is built on meta.

Some modeling code keeps a convolution's stride, kernel size and padding as 0-d integer buffers
(``torch.tensor(stride)``; EnCodec, Mimi and the codecs built on them) and computes its padding from
them in ``forward`` (``int`` of a tensor). Built on the meta device, those buffers have no values, and a
fake forward cannot answer the padding. Under :class:`ScalarsOnCpu` a ``torch.tensor`` call that makes a
0-d integer tensor makes it on the CPU (a 0-d CPU tensor mixes with tensors of any device, as PyTorch
allows), so the built model holds the real values; :func:`scalar_buffers` lists them, and
:mod:`estimator.peak.inputs.other.workloads` makes them known values of the fake forward
(:mod:`estimator.peak.fakes.known_values`). They are a few bytes, counted as buffers as before.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

__all__ = ["ScalarsOnCpu", "scalar_buffers"]


class ScalarsOnCpu(TorchFunctionMode):
    """``torch.tensor(x)`` of a 0-d integer value is made on the CPU; everything else as the modes below say."""

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        if func is torch.tensor and args and "device" not in kwargs and _integer_scalar(args[0], kwargs.get("dtype")):
            return func(*args, **{**kwargs, "device": "cpu"})
        return func(*args, **kwargs)


def _integer_scalar(data: Any, dtype: Any) -> bool:
    if isinstance(data, bool) or not isinstance(data, int):
        return False
    return dtype is None or (isinstance(dtype, torch.dtype) and not dtype.is_floating_point and not dtype.is_complex)


def scalar_buffers(model: nn.Module) -> dict[str, torch.Tensor]:
    """The model's 0-d integer buffers that hold real values on the CPU (by their dotted names): copies."""
    from torch._subclasses.fake_tensor import FakeTensor

    found: dict[str, torch.Tensor] = {}
    for name, buffer in model.named_buffers():
        if buffer is not None and buffer.dim() == 0 and buffer.device.type == "cpu" and not isinstance(buffer, FakeTensor) \
                and not buffer.dtype.is_floating_point and not buffer.dtype.is_complex:
            found[name] = buffer.detach().clone()
    return found
