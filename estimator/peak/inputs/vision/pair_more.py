"""Workloads of the rest of :mod:`estimator.peak.inputs.vision.pair`' models: inputs beside their images that are not text.

- SigLIP 2 image classifier: the NaFlex patches a :class:`~transformers.Siglip2ImageProcessor` makes
  of a square image, ``pixel_values`` (B, N, C * p * p), N = the vision config's ``num_patches`` (its
  processor's ``max_num_patches``: 16 x 16 patches of 16 pixels), the all-ones ``pixel_attention_mask``
  (B, N) and ``spatial_shapes`` (B, 2) = (16, 16) per image; class ``labels`` (B,).
- BLIP-2's Q-Former asked alone: what :class:`~transformers.Blip2Model` feeds it, the learned
  ``query_embeds`` (B, num_query_tokens, hidden) and ``encoder_hidden_states``, the vision tower's
  features of one image (B, (224 / 14)^2 + 1, encoder_hidden_size), sizes of transformers'
  ``Blip2Config`` defaults (the Q-Former's own config has none).
- SAM 3 LiteText's text encoder asked alone: ``input_ids`` and ``attention_mask`` (its class names
  ``pixel_values`` its main input, so the generic path would feed it images).
- OmDet-Turbo: ``pixel_values`` (B, C, S, S) and, as :class:`~transformers.OmDetTurboProcessor` pads
  them to 77 tokens, the class names (``classes_input_ids`` (B * K, 77), K classes per image) and the
  task prompt "Detect {classes}." (``tasks_input_ids`` (B, 77)), ``classes_structure`` (B,) = K.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from estimator.peak.inputs.generic import known_ids, ordinary_token
from estimator.peak.inputs.vision.pair import Maker, known, known_boxes, pair_context, pair_workload, text_inputs
from estimator.peak.sim.prefill import prefill_kwargs
from estimator.peak.workload import ModelKind, Workload, accepts, model_dtype

if TYPE_CHECKING:
    from estimator.peak.workload import Workload

__all__ = ["TYPES", "workload"]

TYPES = frozenset({"siglip2", "blip_2_qformer", "sam3_lite_text_text_model", "omdet-turbo", "udop"})
_PROMPT = 77  # OmDetTurboProcessor's text kwargs: padding="max_length", max_length=77
_CLASSES = 80  # class names per image: the 80 COCO classes, the detector's usual prompt


def workload(model: nn.Module, *, batch_size: int, seq_len: int, image_size: int | None) -> Workload | None:
    """The workload of a model of :data:`TYPES` whose forward takes these inputs; else None."""
    config: Any = getattr(model, "config", None)
    if getattr(config, "model_type", None) == "pi0":  # a vision-language-action model (estimator.peak.inputs.vision.pi0)
        from estimator.peak.inputs.vision import pi0 as pi0_inputs

        return pi0_inputs.workload(model, batch_size=batch_size, seq_len=seq_len, image_size=image_size)
    if getattr(config, "model_type", None) not in TYPES:
        return None
    b = batch_size
    dtype = model_dtype(model)
    name = type(model).__name__
    if config.model_type == "siglip2" and name.endswith("ForImageClassification"):
        return pair_workload(model, [_naflex(config, b, dtype)], ModelKind.IMAGE_CLASSIFICATION)
    if config.model_type == "blip_2_qformer":
        return pair_workload(model, [_qformer(config, b, dtype)])
    if config.model_type == "sam3_lite_text_text_model":
        return pair_workload(model, [text_inputs(model, b, seq_len)])
    if config.model_type == "omdet-turbo":
        return pair_workload(model, _omdet(model, b, image_size, dtype))
    if config.model_type == "udop" and accepts(model, "bbox"):
        return udop_workload(model, b, seq_len, image_size)
    return None


def _naflex(config: Any, b: int, dtype: torch.dtype) -> tuple[str, Maker]:
    vision = config.vision_config
    patch, channels = int(vision.patch_size), int(getattr(vision, "num_channels", 3) or 3)
    side = math.isqrt(int(vision.num_patches))
    n, features, classes = side * side, channels * patch * patch, int(getattr(config, "num_labels", 2))

    def make() -> dict[str, torch.Tensor]:
        return {"pixel_values": torch.randn(b, n, features, dtype=dtype),
                "pixel_attention_mask": known((b, n), 1),
                "spatial_shapes": known((b, 2), side),
                "labels": torch.randint(0, classes, (b,))}

    return (f"pixel_values {b}x{n}x{features} ({side}x{side} patches of {patch} pixels) + pixel_attention_mask "
            f"+ spatial_shapes + class labels"), make


def _qformer(config: Any, b: int, dtype: torch.dtype) -> tuple[str, Maker]:
    from transformers import Blip2Config

    blip2 = Blip2Config()
    queries = int(blip2.num_query_tokens)
    vision: Any = blip2.vision_config
    tokens = (int(vision.image_size) // int(vision.patch_size)) ** 2 + 1
    hidden, features = int(config.hidden_size), int(config.encoder_hidden_size)

    def make() -> dict[str, torch.Tensor]:
        return {"query_embeds": torch.randn(b, queries, hidden, dtype=dtype),
                "encoder_hidden_states": torch.randn(b, tokens, features, dtype=dtype)}

    return (f"query_embeds {b}x{queries}x{hidden} + encoder_hidden_states {b}x{tokens}x{features} (the vision "
            f"tower's features of {vision.image_size}-pixel pixel_values)"), make


def _omdet(model: nn.Module, b: int, image_size: int | None, dtype: torch.dtype) -> list[tuple[str, Maker]]:

    config: Any = model.config
    # the backbone asserts its own img_size (640: OmDetTurboProcessor's size too)
    size = int(image_size or getattr(config.backbone_config, "img_size", None) or config.image_size)
    channels = int(getattr(config.backbone_config, "num_channels", 3) or 3)
    vocab = int(config.text_config.vocab_size)
    token = ordinary_token(config, vocab)
    k = _CLASSES

    def make() -> dict[str, torch.Tensor]:
        return {"pixel_values": torch.randn(b, channels, size, size, dtype=dtype),
                "classes_input_ids": known_ids((b * k, _PROMPT), vocab, token),
                "classes_attention_mask": known((b * k, _PROMPT), 1),
                "tasks_input_ids": known_ids((b, _PROMPT), vocab, token),
                "tasks_attention_mask": known((b, _PROMPT), 1),
                "classes_structure": known((b,), k)}

    return [(f"pixel_values {b}x{channels}x{size}x{size} + {k} class names and a task prompt per image "
             f"({_PROMPT} tokens each)", make)]


def udop_workload(model: nn.Module, b: int, seq_len: int, image_size: int | None) -> Workload:
    """UDOP (a T5 encoder-decoder over text, layout and the page image): ``input_ids`` (B, L), the
    all-ones ``attention_mask``, ``bbox`` (B, L, 4) of valid normalised boxes and ``pixel_values``
    (B, C, S, S); training: the model's loss on ``labels`` (B, L); inference: ``generate``'s prefill
    (the decoder's start token, a cache). The boxes' values are known: UDOP picks the image patches
    under each token's box (``combine_image_text_embeddings``). The simulation still stops there: the
    model unzips the patch indices into tuples of 0-d tensors and indexes with them, which reads their
    memory outside any op (a fake has none); it then falls back to the formula with that cause."""

    config: Any = model.config
    dtype = model_dtype(model)
    vocab = int(config.vocab_size)
    token = ordinary_token(config, vocab)
    size = int(image_size or config.image_size)
    channels = int(getattr(config, "num_channels", 3) or 3)
    n = seq_len
    start = int(config.decoder_start_token_id or 0)

    def make() -> dict[str, torch.Tensor]:
        return {"input_ids": known_ids((b, n), vocab, token), "attention_mask": known((b, n), 1),
                "bbox": known_boxes(b, n, dtype), "pixel_values": torch.randn(b, channels, size, size, dtype=dtype),
                "labels": known_ids((b, n), vocab, token)}

    def train_loss(m: nn.Module, x: dict[str, torch.Tensor]) -> torch.Tensor:
        return m(**x).loss

    def infer(m: nn.Module, x: dict[str, torch.Tensor]) -> Any:
        decoder_ids = torch.full((b, 1), start, dtype=torch.long)
        inputs = {k: v for k, v in x.items() if k != "labels"}
        return m(**inputs, decoder_input_ids=decoder_ids, **prefill_kwargs(m))

    words = (f"input_ids {b}x{n} + attention_mask + bbox {b}x{n}x4 (normalised corners) + pixel_values "
             f"{b}x{channels}x{size}x{size}; training: the model's loss on labels {b}x{n}")
    return Workload(ModelKind.SEQ2SEQ_LM, make, train_loss, infer, words, context=pair_context)
