"""Fallback formulas, used only where the model's own code cannot be run on fake tensors.

They are deliberately plain and say what they leave out; the simulated peak is the product.
"""

from __future__ import annotations

from torch import nn

from estimator.options import Component

__all__ = ["formula_components", "parameter_bytes", "state_bytes"]


def parameter_bytes(model: nn.Module) -> int:
    """Bytes of the distinct parameters and buffers (tied tensors counted once)."""
    seen: set[int] = set()
    total = 0
    for t in list(model.parameters()) + list(model.buffers()):
        if id(t) not in seen:
            seen.add(id(t))
            total += t.numel() * t.element_size()
    return total


def trainable_bytes(model: nn.Module) -> int:
    seen: set[int] = set()
    total = 0
    for p in model.parameters():
        if p.requires_grad and id(p) not in seen:
            seen.add(id(p))
            total += p.numel() * p.element_size()
    return total


def state_bytes(shape: tuple[int, ...], element_size: int, optimizer: str) -> int:
    """Bytes of one parameter's optimizer state, as each optimizer allocates it.

    - adamw: ``exp_avg`` and ``exp_avg_sq`` like the parameter (torch.optim.AdamW; the float
      ``step`` counter is a 4-byte scalar tensor, left out here);
    - sgd: nothing (torch's default ``momentum=0``);
    - adafactor (transformers' ``Adafactor``, ``beta1=None``): for a tensor of 2 or more
      dimensions a float32 row and column second moment (``shape[:-1]`` and
      ``shape[:-2] + shape[-1:]``), else a float32 second moment like the parameter;
    - adamw8bit (bitsandbytes ``Optimizer2State``): tensors of 4,096 elements or more keep two
      uint8 moments and a float32 absmax per block of 256 for each; smaller ones two float32 moments.
    """
    numel = 1
    for n in shape:
        numel *= n
    if optimizer == "sgd":
        return 0
    if optimizer == "adafactor":
        if len(shape) >= 2:
            rows = numel // shape[-1]
            cols = numel // shape[-2]
            return 4 * (rows + cols)
        return 4 * numel
    if optimizer == "adamw8bit":
        if numel >= 4096:
            return 2 * numel + 2 * 4 * -(-numel // 256)
        return 2 * 4 * numel
    return 2 * numel * element_size


def formula_components(model: nn.Module, mode: str, optimizer: str = "adamw") -> dict[str, int]:
    """Weights, plus for training one gradient and the optimizer's states per trainable parameter
    (:func:`state_bytes`).

    Source: the "Transformer Math 101" accounting (EleutherAI, 2023) without its activation term,
    which depends on the architecture. Known limits: activations, temporaries and the KV cache
    are *not* counted, so this is a lower bound.
    """
    comps = {Component.WEIGHTS.value: parameter_bytes(model)}
    if mode == "training":
        trainable = {id(p): p for p in model.parameters() if p.requires_grad}.values()
        comps[Component.GRADIENTS.value] = trainable_bytes(model)
        states = sum(state_bytes(tuple(p.shape), p.element_size(), optimizer) for p in trainable)
        if states:
            comps[Component.OPTIMIZER_STATES.value] = states
    return comps
