"""The closed vocabulary of memory components a peak is broken down into.

The names are the public JSON keys of ``components`` (see the project's contract).
"""

from __future__ import annotations

from enum import Enum

__all__ = ["Component"]


class Component(str, Enum):
    """What a live tensor storage holds at the peak instant."""

    WEIGHTS = "weights"
    GRADIENTS = "gradients"
    OPTIMIZER_STATES = "optimizer_states"
    ACTIVATIONS = "activations"
    TEMPORARIES = "temporaries"
    KV_CACHE = "kv_cache"
    INPUTS = "inputs"
