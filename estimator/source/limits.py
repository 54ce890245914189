"""Sanity checks on a config before anything is built: wrong types and absurd sizes.

A config asking for a billion layers would make the meta build run for hours and the answer
would mean nothing; it is refused here in microseconds. The bounds are far beyond any published
model (the largest public dense and MoE models have under 200 layers, hidden sizes under
32,768 and under 2·10¹² parameters) so that no real model is refused.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from estimator.errors import AbsurdSizeError, MalformedConfigError

# Size fields of transformers configs (and their GPT-2 / T5 / timm spellings).
_SIZE_FIELDS = {
    "num_hidden_layers", "n_layer", "num_layers", "n_layers", "num_decoder_layers", "encoder_layers", "decoder_layers",
    "hidden_size", "n_embd", "d_model", "dim", "embed_dim", "intermediate_size", "ffn_dim", "d_ff", "n_inner",
    "vocab_size", "num_attention_heads", "n_head", "num_heads", "num_key_value_heads", "head_dim",
    "num_local_experts", "n_routed_experts", "num_experts", "moe_intermediate_size", "max_position_embeddings",
    "num_classes", "image_size", "patch_size",
}
_LAYER_FIELDS = {"num_hidden_layers", "n_layer", "num_layers", "n_layers", "num_decoder_layers", "encoder_layers", "decoder_layers"}
_WIDTH_FIELDS = {"hidden_size", "n_embd", "d_model", "dim", "embed_dim"}

MAX_LAYERS = 4096
MAX_WIDTH = 1 << 18  # 262,144
MAX_FIELD = 1 << 31
MAX_PARAMETERS = 2 * 10**13  # 20 trillion: ten times the largest published model


def _size_fields(config: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for key, value in config.items():
        if isinstance(value, dict):
            yield from _size_fields(value, f"{prefix}{key}.")
        elif key in _SIZE_FIELDS:
            yield prefix + key, value


def check_config(config: dict[str, Any], *, model: str) -> None:
    """Raise :class:`MalformedConfigError` or :class:`AbsurdSizeError` for configs no real model has."""
    layers = widths = 1
    intermediate = vocab = experts = 0
    for name, value in _size_fields(config):
        key = name.rsplit(".", 1)[-1]
        if value is None:
            continue
        if isinstance(value, list) and value and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            # one value per stage (CvT's embed_dim, Swin's num_heads, an image's height and width): each is checked
            value = max(value) if min(value) >= 0 else min(value)
        if isinstance(value, float) and value.is_integer() and abs(value) <= MAX_FIELD:
            value = int(value)  # a whole number written as a float (MusicFlamingo's max_position_embeddings 1200.0); its library takes it
        if isinstance(value, bool) or not isinstance(value, int):
            raise MalformedConfigError(f"The config of {model} has {name} = {value!r}; it must be a whole number "
                                       "(or a list of whole numbers, one per stage).")
        if value < 0:
            raise MalformedConfigError(f"The config of {model} has {name} = {value}; sizes cannot be negative.")
        if value > MAX_FIELD or (key in _LAYER_FIELDS and value > MAX_LAYERS) or (key in _WIDTH_FIELDS and value > MAX_WIDTH):
            raise AbsurdSizeError(f"The config of {model} has {name} = {value:,}, far beyond any real model; refusing to build it.")
        if key in _LAYER_FIELDS:
            layers = max(layers, value)
        elif key in _WIDTH_FIELDS:
            widths = max(widths, value)
        elif key in ("intermediate_size", "ffn_dim", "d_ff", "n_inner", "moe_intermediate_size"):
            intermediate = max(intermediate, value)
        elif key == "vocab_size":
            vocab = max(vocab, value)
        elif key in ("num_local_experts", "n_routed_experts", "num_experts"):
            experts = max(experts, value)
    # A generous upper bound of a transformer's parameter count (attention 4h², MLP 3·h·i per expert).
    rough = 2 * vocab * widths + layers * (4 * widths * widths + 3 * widths * max(intermediate, 4 * widths) * max(1, experts))
    if rough > MAX_PARAMETERS:
        raise AbsurdSizeError(f"The config of {model} describes about {rough:.1e} parameters, far beyond any real model; refusing to build it.")


_POSITION_FIELDS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "n_ctx")


def max_positions(config: dict[str, Any]) -> int | None:
    """The longest sequence the config states (its position table or trained context), or ``None``;
    a multimodal config's text part (``text_config``) counts."""
    found = position_field(config)
    return None if found is None else found[1]


def position_field(config: dict[str, Any]) -> tuple[str, int] | None:
    """Which field states the longest sequence (see :func:`max_positions`), and its value."""
    for part in (config, config.get("text_config") or {}):
        if not isinstance(part, dict):
            continue
        for key in _POSITION_FIELDS:
            value = part.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return key, value
    return None
