"""What ``generate`` adds to the model's forward: the cache and ``logits_to_keep`` of the prefill
(:func:`prefill_kwargs`), the mask and positions it keeps (:func:`generate_kwargs`)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from estimator.peak.sim.caches import cache_argument
from estimator.peak.workload import accepts

__all__ = ["generate_kwargs", "prefill_kwargs"]


def prefill_kwargs(model: nn.Module) -> dict[str, Any]:
    """What ``generate`` adds to the first forward: a cache object and, where the model takes it,
    ``logits_to_keep=1`` (transformers 5 ``GenerationMixin.generate``: "set it to 1 to avoid
    computing the whole logit matrix")."""
    from transformers import DynamicCache, EncoderDecoderCache

    config: Any = model.config
    kwargs: dict[str, Any] = {"use_cache": True}
    if config.is_encoder_decoder:
        kwargs["past_key_values"] = EncoderDecoderCache(DynamicCache(), DynamicCache())
    elif getattr(model, "_supports_default_dynamic_cache", lambda: True)():
        # under generate's keyword for it (Mamba-named models: cache_params); hybrid configs get their
        # linear-attention layers from layer_types (transformers' get_layer_types_and_kwargs)
        kwargs[cache_argument(model)] = DynamicCache(config=config.get_text_config(decoder=True))
    # else, as generate: the model makes its own cache (MiniMax's MiniMaxCache)
    if accepts(model, "logits_to_keep"):
        kwargs["logits_to_keep"] = 1
    return kwargs


def generate_kwargs(model: nn.Module, batch_size: int, length: int) -> dict[str, Any]:
    """The 2-D ``attention_mask`` and ``position_ids`` that ``generate`` keeps for a decoder-only
    model (``GenerationMixin._prepare_attention_mask_for_generation``: ones when the ids carry no
    padding; ``_prepare_position_ids_for_generation``: ``cumsum - 1``, where the model's forward
    takes ``position_ids``), for ``length`` positions. Measured on a 2-layer Mixtral (batch 2 x 256):
    the batch-sized position ids (and so rotary tables) are 38,912 bytes of generate's peak that a
    bare forward does not have."""
    mask = torch.ones(batch_size, length, dtype=torch.long)
    kwargs: dict[str, Any] = {"attention_mask": mask}
    if accepts(model, "position_ids"):
        kwargs["position_ids"] = (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 0)
    return kwargs
