"""Fallback formulas, used only where the model's own code cannot be run on fake tensors.

They are deliberately plain and say what they leave out; the simulated peak is the product.
"""

from __future__ import annotations

from torch import nn

from estimator.peak.components import Component

__all__ = ["formula_components", "parameter_bytes"]


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


def formula_components(model: nn.Module, mode: str) -> dict[str, int]:
    """Weights, plus for training one gradient and two AdamW states per trainable parameter.

    Source: the "Transformer Math 101" accounting (EleutherAI, 2023) without its activation term,
    which depends on the architecture. Known limits: activations, temporaries and the KV cache
    are *not* counted, so this is a lower bound.
    """
    comps = {Component.WEIGHTS.value: parameter_bytes(model)}
    if mode == "training":
        grads = trainable_bytes(model)
        comps[Component.GRADIENTS.value] = grads
        comps[Component.OPTIMIZER_STATES.value] = 2 * grads
    return comps
