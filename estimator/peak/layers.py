"""Repeated decoder layers: simulate a few, extrapolate to all of them, and check it is linear.

A decoder-only transformer whose layers are all alike adds the same bytes per layer to every
component at the peak instant (weights, gradients, optimizer states, saved activations, the KV
cache, the foreach optimizer's temporaries), as long as the peak stays at the same place of the
step. So the model is rebuilt on meta with ``k = 2, 3, 4`` layers (``type(model)._from_config``
on a copy of its config), each is simulated in full, and the result for ``N`` layers is
``r(4) + (N - 4) * (r(4) - r(3))`` per component. It is used only when

- the config says the layers are alike (``layer_types`` absent or uniform, no known per-layer
  switches such as ``first_k_dense_replace`` or ``mlp_only_layers``), and
- the three samples are exactly linear (``r(4) - r(3) == r(3) - r(2)`` for the peak and every
  component, to the byte): anything that changes with the layer index or moves the peak shows up
  as a non-zero second difference, and the caller then simulates the full model.

``tests/test_peak_layers.py`` checks extrapolated against full simulations within 0.5%.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

__all__ = ["SAMPLE_LAYERS", "extrapolate", "layer_count", "with_layers"]

logger = logging.getLogger(__name__)

SAMPLE_LAYERS = (2, 3, 4)

# Config keys that make some layers differ from others (dense vs MoE, cross-attention, ...).
_HETEROGENEOUS_KEYS = (
    "first_k_dense_replace",
    "mlp_only_layers",
    "decoder_sparse_step",
    "moe_layer_freq",
    "cross_attention_layers",
    "attn_layer_indices",
    "no_rope_layers",
    "moe_layer_start_index",
)


def layer_count(model: nn.Module) -> int | None:
    """The number of alike decoder layers, or ``None`` where extrapolation does not apply."""
    config = getattr(model, "config", None)
    if config is None or getattr(config, "is_encoder_decoder", False):
        return None
    n = getattr(config, "num_hidden_layers", None)
    if not isinstance(n, int) or n <= max(SAMPLE_LAYERS) + 1:
        return None
    layer_types = getattr(config, "layer_types", None)
    if layer_types is not None and len(set(layer_types)) > 1:
        return None
    for key in _HETEROGENEOUS_KEYS:
        if getattr(config, key, None) not in (None, 0, [], 1 if key == "decoder_sparse_step" else None):
            return None
    return n


def with_layers(model: nn.Module, k: int) -> nn.Module:
    """The same architecture with ``k`` layers, built on meta in the model's dtype."""
    config: Any = copy.deepcopy(model.config)
    config.num_hidden_layers = k
    if getattr(config, "layer_types", None) is not None:
        config.layer_types = list(config.layer_types)[:k]
    dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)
    with torch.device("meta"):
        return type(model)._from_config(config, dtype=dtype)  # type: ignore[attr-defined]


def extrapolate(
    model: nn.Module, n_layers: int, simulate: Callable[[nn.Module], Any]
) -> tuple[int, dict[str, int], tuple[str, ...]] | None:
    """Peak bytes, components and notes for ``n_layers``; ``None`` if the samples are not linear.

    ``simulate(model) -> (peak_bytes, components, notes)`` runs the full simulation of a model.
    """
    samples = [simulate(with_layers(model, k)) for k in SAMPLE_LAYERS]
    (p2, c2, _), (p3, c3, _), (p4, c4, notes) = samples
    keys = set(c2) | set(c3) | set(c4)
    if p4 - p3 != p3 - p2 or any(
        c4.get(k, 0) - c3.get(k, 0) != c3.get(k, 0) - c2.get(k, 0) for k in keys
    ):
        logger.info("layer samples not linear (%d, %d, %d): full simulation", p2, p3, p4)
        return None
    steps = n_layers - SAMPLE_LAYERS[-1]
    comps = {k: c4.get(k, 0) + steps * (c4.get(k, 0) - c3.get(k, 0)) for k in keys}
    comps = {k: v for k, v in comps.items() if v}
    return p4 + steps * (p4 - p3), comps, notes
