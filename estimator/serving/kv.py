"""KV-cache bytes per token, layer by layer, from a transformers config.

Which layers keep a KV cache and which are sliding-window layers is what transformers itself
decides: :func:`transformers.cache_utils.get_layer_types_and_kwargs` (the function ``DynamicCache``
uses) reads ``layer_types`` where the config has it (Gemma 2/3 alternate sliding and full layers;
Qwen2's ``use_sliding_window``/``max_window_layers`` are turned into ``layer_types`` by its config
class), else ``sliding_window`` (Mistral: every layer) or ``attention_chunk_size``. Layers that keep
no KV (``dummy``: MoE/MLP-only layers, KV-sharing consumers) cost nothing; recurrent layers (Mamba,
linear attention, short convolutions: transformers' ``LinearAttentionLayer`` kinds ``linear_attention``
and ``conv``) keep a fixed state per request, not per-token KV: a ``"mamba"`` layer whose
``state_bytes`` are vLLM's ``MambaSpec`` page (:mod:`estimator.serving.states`); a ``hybrid`` layer
(Falcon-H1: attention and Mamba2 side by side) is one of each, as vLLM registers them.

Per token and layer, attention keeps ``2 (K and V) x num_key_value_heads x head_dim x dtype bytes``
(GQA/MQA through ``num_key_value_heads``; ``head_dim`` from the config where it says so, as Gemma
does, else ``hidden_size // num_attention_heads``). Multi-head latent attention (DeepSeek-V2/V3/R1,
``kv_lora_rank`` in the config) keeps one latent of ``kv_lora_rank + qk_rope_head_dim`` values per
token and layer, no K/V pair: vLLM's ``MLAAttentionSpec`` (one "head" of that size), and
transformers 5 alike (``DeepseekV3Attention`` caches ``kv_nope`` and ``k_rot`` as one-head "keys"
and "values"; tests/test_kv_per_token.py checks it on a prefill).

A sliding-window layer holds at most ``sliding_window`` tokens of context (what attention reads
at a step); :meth:`KVLayout.bytes_for` caps each such layer there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from estimator.errors import UnsupportedError
from estimator.serving.states import StateShapes, state_shapes

__all__ = ["KVLayer", "KVLayout", "kv_layout"]

LayerKind = Literal["full", "sliding", "mla", "mamba"]

_NO_KV = frozenset({"dummy", "moe", "mlp"})
_SLIDING = frozenset({"sliding_attention", "chunked_attention"})
_FULL = frozenset({"full_attention"})
_STATE_LAYERS = frozenset({"linear_attention", "conv"})  # transformers' LinearAttentionLayer kinds
_HYBRID = {"hybrid": "full", "hybrid_sliding": "sliding"}  # LinearAttentionAndFullAttentionLayer: attention + state


@dataclass(frozen=True)
class KVLayer:
    """One decoder layer's cache: what kind, bytes per token, and the window of a sliding layer; a
    recurrent (``"mamba"``) layer keeps ``state_bytes`` per request whatever the context."""

    kind: LayerKind
    bytes_per_token: int
    window: int | None = None  # tokens a sliding layer keeps; None: the whole context
    state_bytes: int = 0  # a recurrent layer's state per request (vLLM's MambaSpec page before padding)
    state: StateShapes | None = None

    def bytes_for(self, tokens: int) -> int:
        if self.kind == "mamba":
            return self.state_bytes
        return self.bytes_per_token * (tokens if self.window is None else min(tokens, self.window))


@dataclass(frozen=True)
class KVLayout:
    """The KV cache of a model, layer by layer (layers that keep none are left out)."""

    layers: tuple[KVLayer, ...]
    dtype_bytes: int
    # a model with attention and recurrent layers: (attention bytes per token, a layer's state bytes) over the
    # whole model, which set the block size and page of every pipeline stage alike (vLLM sets them from the config)
    hybrid: tuple[int, int] | None = None

    @property
    def bytes_per_token(self) -> int:
        """Bytes one more token adds while every layer still holds the whole context (no window reached)."""
        return sum(layer.bytes_per_token for layer in self.layers)

    @property
    def state_bytes(self) -> int:
        """Bytes of the recurrent layers' state of one request (0 without recurrent layers)."""
        return sum(layer.state_bytes for layer in self.layers)

    @property
    def attention(self) -> tuple[KVLayer, ...]:
        return tuple(layer for layer in self.layers if layer.kind != "mamba")

    @property
    def recurrent(self) -> tuple[KVLayer, ...]:
        return tuple(layer for layer in self.layers if layer.kind == "mamba")

    def bytes_for(self, tokens: int) -> int:
        """Bytes of the cache for one sequence of ``tokens`` tokens, sliding layers capped at their window."""
        return sum(layer.bytes_for(tokens) for layer in self.layers)


def _int(config: Any, name: str) -> int | None:
    value = getattr(config, name, None)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _head_dim(config: Any) -> int:
    explicit = _int(config, "head_dim")
    if explicit:
        return explicit
    hidden, heads = _int(config, "hidden_size"), _int(config, "num_attention_heads")
    if not hidden or not heads:
        raise UnsupportedError(f"{type(config).__name__} names no hidden_size and num_attention_heads: its KV cache cannot be sized.")
    return hidden // heads


def _per_token(text: Any, dtype_bytes: int, tp: int, is_mla: bool) -> int:
    if is_mla:
        return (int(text.kv_lora_rank) + int(text.qk_rope_head_dim)) * dtype_bytes
    heads = _int(text, "num_attention_heads")
    kv_heads = _int(text, "num_key_value_heads") or heads
    if not kv_heads:
        raise UnsupportedError(f"{type(text).__name__} names no attention heads: its KV cache cannot be sized.")
    return 2 * max(kv_heads // tp, 1) * _head_dim(text) * dtype_bytes


def kv_layout(config: Any, *, dtype_bytes: int, layers: range | None = None, tp: int = 1,
              model_bytes: int | None = None) -> KVLayout:
    """The per-layer KV cache of the decoder of ``config`` (a transformers ``PreTrainedConfig``).

    ``layers``: only those decoder layers (a pipeline stage); ``tp``: one tensor-parallel rank's share
    (vLLM splits the KV heads over the ranks, each keeping at least one; an MLA latent is not split);
    ``model_bytes``: the model dtype's bytes, in which recurrent states are kept (default ``dtype_bytes``)."""
    from transformers.cache_utils import get_layer_types_and_kwargs

    text = config.get_text_config(decoder=True)
    layer_types, layer_kwargs = get_layer_types_and_kwargs(text)
    is_mla = _int(text, "kv_lora_rank") is not None
    attention = [t for t in layer_types if t in _SLIDING or t in _FULL or t in _HYBRID]
    per_token = _per_token(text, dtype_bytes, tp, is_mla) if attention else 0
    kept = layers
    found: list[KVLayer] = []
    state: StateShapes | None = None
    for index, (layer_type, kwargs) in enumerate(zip(layer_types, layer_kwargs, strict=True)):
        if layer_type in _NO_KV or (kept is not None and index not in kept):
            continue
        if layer_type in _STATE_LAYERS or layer_type in _HYBRID:
            state = state or state_shapes(text, model_bytes=model_bytes or dtype_bytes, tp=tp)
            found.append(KVLayer("mamba", 0, state_bytes=state.page_bytes, state=state))
            layer_type = _HYBRID.get(layer_type, "")
            if not layer_type:
                continue
            layer_type = "full_attention" if layer_type == "full" else "sliding_attention"
        if layer_type in _SLIDING:
            found.append(KVLayer("sliding", per_token, int(kwargs["sliding_window"])))
        elif layer_type in _FULL:
            found.append(KVLayer("mla" if is_mla else "full", per_token))
        else:
            raise UnsupportedError(
                f"{type(text).__name__} has {layer_type!r} layers (a compressed state, not a per-token KV "
                "cache); vLLM's blocks for them are not planned yet"
            )
    hybrid = None
    if attention and state is None and any(t in _STATE_LAYERS or t in _HYBRID for t in layer_types):
        state = state_shapes(text, model_bytes=model_bytes or dtype_bytes, tp=tp)  # this stage keeps none
    if attention and state is not None:
        hybrid = (per_token, state.page_bytes)
    return KVLayout(tuple(found), dtype_bytes, hybrid)
