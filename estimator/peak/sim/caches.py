"""The generation cache a model returns, and what each of its tensors holds.

transformers 5 keeps every decoder's generation state in one ``Cache`` object
(``transformers/cache_utils.py``) whose ``layers`` are, per the config's ``layer_types``
(``get_layer_types_and_kwargs``, ``DYNAMIC_LAYER_TYPE_MAPPING``):

- attention layers (``DynamicLayer``, ``DynamicSlidingWindowLayer``, ...): ``keys`` and ``values``,
  growing with the context — the KV cache;
- linear-attention / SSM layers (``LinearAttentionLayer``: Mamba, Mamba2, Jamba, Falcon-H1, Bamba,
  GraniteMoeHybrid, Qwen3-Next's gated delta net, LFM2's short convolutions): ``conv_states`` (the
  last ``conv_kernel`` inputs of the causal convolution) and ``recurrent_states`` (the SSM or
  delta-rule state), both of a fixed size per sequence, whatever the context;
- hybrid layers (``LinearAttentionAndFullAttentionLayer``): both;
- MiniMax's own ``MiniMaxCache`` (``generate`` passes it no cache; the model makes it): the
  lightning-attention layers' states in ``linear_cache``;
- RWKV's ``state`` (a list of tensors the model returns and takes back): its recurrent state.

:func:`label_cache` labels each of those storages ``kv_cache``, ``conv_state`` or ``ssm_state``.
:func:`cache_argument` is the keyword under which ``generate`` passes the cache, and
:func:`returned_cache` finds it on the model's output (Mamba-named models call it ``cache_params``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from estimator.options import Component
from estimator.peak.sim.tracker import StorageTracker
from estimator.peak.workload import accepts

__all__ = ["cache_argument", "label_cache", "returned_cache", "state_tensors", "tensors_in"]


def cache_argument(model: nn.Module) -> str:
    """The forward's keyword for the cache, by ``generate``'s own rule
    (``GenerationMixin._prepare_cache_for_generation``: ``"mamba" in`` the class name -> ``cache_params``);
    RWKV, which takes no ``Cache`` (``_supports_default_dynamic_cache`` is false), carries its ``state``."""
    if "mamba" in type(model).__name__.lower():
        return "cache_params"
    if not getattr(model, "_supports_default_dynamic_cache", lambda: True)() and accepts(model, "state"):
        return "state"
    return "past_key_values"


def returned_cache(out: Any) -> Any:
    """The cache a model's forward returned (``past_key_values``, Mamba's ``cache_params``, RWKV's ``state``), or ``None``."""
    for name in ("past_key_values", "cache_params", "state"):
        cache = getattr(out, name, None)
        if cache is not None:
            return cache
    return None


def tensors_in(obj: Any, depth: int = 4) -> Iterator[torch.Tensor]:
    """Tensors reachable from an output or a cache object (its layers' keys, values and states)."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif depth == 0 or obj is None or isinstance(obj, (int, float, str, bool)):
        return
    elif isinstance(obj, (list, tuple)):
        for item in obj:
            yield from tensors_in(item, depth - 1)
    elif isinstance(obj, dict):
        for item in obj.values():
            yield from tensors_in(item, depth - 1)
    elif hasattr(obj, "__dict__"):
        for item in vars(obj).values():
            yield from tensors_in(item, depth - 1)


def _layers(cache: Any) -> Iterator[Any]:
    for sub in (cache, getattr(cache, "self_attention_cache", None), getattr(cache, "cross_attention_cache", None)):
        yield from getattr(sub, "layers", None) or ()


def state_tensors(cache: Any) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The ``conv_states`` and ``recurrent_states`` tensors of a cache's linear-attention layers."""
    conv: list[torch.Tensor] = []
    recurrent: list[torch.Tensor] = []
    for layer in _layers(cache):
        for name, into in (("conv_states", conv), ("recurrent_states", recurrent)):
            states = getattr(layer, name, None)
            if isinstance(states, dict):
                into.extend(t for t in states.values() if isinstance(t, torch.Tensor))
    # MiniMax's own cache (MiniMaxCache, a DynamicCache): its lightning-attention layers' states in linear_cache
    recurrent.extend(t for t in getattr(cache, "linear_cache", None) or () if isinstance(t, torch.Tensor))
    return conv, recurrent


def label_cache(tracker: StorageTracker, cache: Any) -> None:
    """Label the storages of ``cache``: conv and recurrent states as ``conv_state`` and
    ``ssm_state``, every other tensor it holds (keys and values) as ``kv_cache``."""
    if cache is None:
        return
    if isinstance(cache, (list, tuple)) and all(isinstance(t, torch.Tensor) for t in cache):  # RWKV's state
        tracker.relabel(cache, Component.SSM_STATE)
        return
    tracker.relabel(tensors_in(cache), Component.KV_CACHE)
    conv, recurrent = state_tensors(cache)
    tracker.relabel(conv, Component.CONV_STATE)
    tracker.relabel(recurrent, Component.SSM_STATE)
