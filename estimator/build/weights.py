"""Exact bytes of a model built on the meta device: total, largest no-split group, Adam training.

The truth for a dtype is what ``from_pretrained(..., dtype=X)`` leaves in memory, which is what
``cls._from_config(config, dtype=X)`` builds: every unique parameter and buffer storage, tied
weights once, buffers that the modeling code creates in float32 on purpose (rotary ``inv_freq``)
left in float32. The model is built on the meta device in the row's dtype, so the dtypes are the
modeling code's own, not a rule of ours.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import nn

# Mixed-precision AdamW keeps, per trainable parameter: the 16-bit weight and gradient (2 + 2
# bytes), an fp32 master copy (4) and two fp32 moments (4 + 4) = 16 bytes (Rajbhandari et al.,
# "ZeRO", 2020, section 3.1). In fp32: weight, gradient and two moments, 4 bytes each.
ADAM_STATE_BYTES_PER_PARAM = 8  # exp_avg and exp_avg_sq in fp32
MASTER_BYTES_PER_PARAM = 4


def unique_tensors(model: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """Every parameter and buffer once (tied weights are one object and come once)."""
    seen: set[int] = set()
    for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
        if tensor is None or id(tensor) in seen:
            continue
        seen.add(id(tensor))
        yield name, tensor


def tensor_bytes(tensor: torch.Tensor) -> int:
    """Bytes of ``tensor``'s elements (meta tensors have no storage, only a size)."""
    return tensor.numel() * tensor.element_size()


@dataclass(frozen=True)
class WeightBytes:
    """Exact byte counts of one built model."""

    total_bytes: int
    largest_layer_bytes: int
    largest_layer_names: tuple[str, ...]
    trainable_parameters: int
    trainable_bytes: int
    low_precision_parameters: int  # trainable parameters held in fewer than 32 bits
    buffer_bytes: int


def module_sizes(model: nn.Module) -> dict[str, int]:
    """Bytes per module name (and every prefix), each unique tensor counted at its first name."""
    sizes: dict[str, int] = {}
    for name, tensor in unique_tensors(model):
        size = tensor_bytes(tensor)
        parts = name.split(".")
        for depth in range(len(parts) + 1):
            prefix = ".".join(parts[:depth])
            sizes[prefix] = sizes.get(prefix, 0) + size
    return sizes


def largest_layer(model: nn.Module, sizes: dict[str, int]) -> tuple[int, tuple[str, ...]]:
    """accelerate's definition: the largest group that ``device_map="auto"`` cannot split.

    A group is a module with no children, or one whose class is in the model's
    ``_no_split_modules``; accelerate's own ``get_max_layer_size`` walks the tree.
    """
    from accelerate.utils import get_max_layer_size

    no_split = list(getattr(model, "_no_split_modules", None) or [])
    roots = [*model.named_parameters(recurse=False), *model.named_children(), *model.named_buffers(recurse=False)]
    # Modules that hold no tensor of their own (a dropout, an activation) have no size entry.
    padded = _SizeLookup(sizes)
    size, names = get_max_layer_size(roots, padded, no_split)
    return int(size), tuple(names)


class _SizeLookup(dict[str, int]):  # a dict that answers 0 for tensor-less modules
    def __missing__(self, key: str) -> int:
        return 0


def measure(model: nn.Module) -> WeightBytes:
    """Exact bytes of ``model`` as built (in the dtype it was built in)."""
    sizes = module_sizes(model)
    largest, names = largest_layer(model, sizes)
    params = {id(p): p for p in model.parameters()}
    trainable = [p for p in params.values() if p.requires_grad and p.is_floating_point()]
    trainable_parameters = sum(p.numel() for p in trainable)
    trainable_bytes = sum(tensor_bytes(p) for p in trainable)
    total = sizes.get("", 0)
    param_bytes = sum(tensor_bytes(p) for p in params.values())
    return WeightBytes(
        total_bytes=total,
        largest_layer_bytes=largest,
        largest_layer_names=names,
        trainable_parameters=trainable_parameters,
        trainable_bytes=trainable_bytes,
        low_precision_parameters=sum(p.numel() for p in trainable if p.element_size() < 4),
        buffer_bytes=total - param_bytes,
    )


def training_adam_bytes(weights: WeightBytes, *, mixed_precision: bool) -> int:
    """Weights + gradients + AdamW states (+ fp32 master weights when ``mixed_precision``).

    Never includes activations. fp32: 4 (weight) + 4 (gradient) + 8 (two moments) bytes per
    trainable parameter. 16-bit mixed precision: 2 + 2 + 4 (master) + 8 = 16 bytes per parameter.
    Buffers count once, as loaded.
    """
    gradients = weights.trainable_bytes
    states = weights.trainable_parameters * ADAM_STATE_BYTES_PER_PARAM
    master = weights.low_precision_parameters * MASTER_BYTES_PER_PARAM if mixed_precision else 0
    return weights.total_bytes + gradients + states + master
