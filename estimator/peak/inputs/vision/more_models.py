"""Workloads of more vision models whose inputs the generic image path does not make (asked by
:func:`estimator.peak.inputs.providers.workload_for` before :mod:`estimator.peak.inputs.vision.models`).

``workload(model, batch_size=, seq_len=, image_size=)`` returns a :class:`~estimator.peak.inputs.generic.Workload`
for the models below, else None. Images are what the model's own transformers image processor returns
for ``batch_size`` random RGB images (:func:`estimator.peak.inputs.vision.models.processed`), at ``image_size``
square where it is given, else at the processor's own resolution; integer inputs are fakes whose values
are known (:mod:`estimator.peak.fakes.known_values`), so the model's questions about them are answered as the
real run answers them. Training runs its first step in full (``Workload.full_first_step``): these losses leave
some parameters without gradients (a base model's unused heads, DepthPro's field-of-view branch), and AdamW
keeps no state for them, as in the real run.

- **DepthPro** (model and depth estimation): ``pixel_values`` at ``patch_size / min(scaled_images_ratios)``
  pixels square, the size at which its lowest-resolution copy of the image is one patch (its checkpoints:
  384 / 0.25 = 1536, DepthProImageProcessor's size). Training backpropagates the sum of the first output.
- **Mask2Former** (base model): the processor's ``pixel_values`` and ``pixel_mask`` (800 px for a square
  image). Its encoder asks in training whether its activations are all finite (they are: the known-values
  mode answers it). Training backpropagates the sum of the first output (the base model has no loss).
- **OneFormer** (base model): the processor's ``pixel_values`` and ``pixel_mask`` and ``task_inputs``:
  OneFormerProcessor's ``"the task is semantic"`` tokenized by CLIP's tokenizer and padded with zeros to
  the config's ``task_seq_len`` (start and end ids as CLIP's, the three words' ids stand-ins: their
  values change no shape). Its masked attention asks which queries' predicted masks are empty
  (``torch.where`` on activations): answered as all of them, the largest ``nonzero`` output (a few kB).
  Training backpropagates the sum of the first output.
- **Grounding DINO / MM-Grounding-DINO**: the processor's ``pixel_values`` and ``pixel_mask`` beside the
  text prompt as GroundingDinoProcessor tokenizes it with BERT's tokenizer: ``[CLS]`` phrases ``"a thing ."``
  ``[SEP]`` over ``seq_len`` tokens (``input_ids`` with BERT's ``[CLS]`` 101, ``[SEP]`` 102 and ``.`` 1012,
  which the model finds by value to split the phrases; ``attention_mask`` ones, ``token_type_ids``
  zeros). Training backpropagates the sum of the first output.
- **V-JEPA 2** (base model): ``pixel_values_videos`` from VJEPA2VideoProcessor (see :func:`_vjepa2`); training
  the JEPA objective (L1 of the predictor's output to the detached target states).
- **EfficientLoFTR** training: transformers refuses ``labels`` ("not trainable"); a user fine-tuning its
  feature extractor backpropagates a loss of its outputs, the coarse and fine feature maps it returns:
  their sum here (inference: :mod:`estimator.peak.inputs.vision.models`'s image pairs).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from estimator.peak.fakes.known_values import KnownValues
from estimator.peak.inputs.vision.models import as_model_dtype, image_side, known_inputs_maker, processed, shapes_text
from estimator.peak.workload import ModelKind, Workload, forward_all

if TYPE_CHECKING:
    from estimator.peak.workload import Workload

__all__ = ["workload"]

_BERT_CLS, _BERT_SEP, _BERT_DOT = 101, 102, 1012  # the ids Grounding DINO's SPECIAL_TOKENS hard-codes (bert-base-uncased)
_BERT_A, _BERT_THING = 1037, 2518  # "a", "thing" in bert-base-uncased (below a smaller vocabulary: its last ids)
_CLIP_START, _CLIP_END = 49406, 49407  # CLIP's <|startoftext|>, <|endoftext|>


def workload(model: nn.Module, *, batch_size: int, seq_len: int, image_size: int | None) -> Workload | None:
    """The workload of a model of the module docstring, else None."""
    config: Any = getattr(model, "config", None)
    model_type = str(getattr(config, "model_type", "") or "")
    name = type(model).__name__
    if model_type == "depth_pro":
        side = image_size or int(round(int(config.patch_size) / min(config.scaled_images_ratios)))
        return _images(model, "depth_pro", side, batch_size, {}, f"{name}: DepthProImageProcessor at {side} px")
    if model_type == "mask2former" and name == "Mask2FormerModel":
        return _images(model, model_type, image_size, batch_size, {}, f"{name}: Mask2FormerImageProcessor")
    if model_type == "oneformer" and name == "OneFormerModel":
        length = int(config.task_seq_len)
        vocab = int(getattr(config, "text_encoder_vocab_size", 0) or 0) or _CLIP_END + 1
        words = [min(_CLIP_START, vocab - 1)] + [min(_CLIP_START - 1 - i, vocab - 2) for i in range(4)] + [min(_CLIP_END, vocab - 1)]
        task = torch.zeros(batch_size, length, dtype=torch.long)
        task[:, : len(words)] = torch.tensor(words[:length])
        return _images(model, model_type, image_size, batch_size, {"task_inputs": task},
                       f"{name}: OneFormerImageProcessor + task_inputs 'the task is semantic' padded to {length}; the rows "
                       "its masked attention finds empty (torch.where on activations) counted as all rows, an upper bound",
                       context=_rows_where)
    if model_type in ("grounding-dino", "mm-grounding-dino"):
        vocab = int(config.text_config.vocab_size)
        ids = _prompt(seq_len, vocab)
        text = {"input_ids": ids.expand(batch_size, -1).clone(), "attention_mask": torch.ones(batch_size, seq_len, dtype=torch.long),
                "token_type_ids": torch.zeros(batch_size, seq_len, dtype=torch.long)}
        return _images(model, "grounding-dino", image_size, batch_size, text,
                       f"{name}: GroundingDinoImageProcessor + a BERT-tokenized prompt of {seq_len} tokens")
    if model_type == "efficientloftr":
        return _loftr(model, batch_size, image_size)
    if model_type == "vjepa2" and name == "VJEPA2Model":
        return _vjepa2(model, batch_size, image_size)
    return None


def _vjepa2(model: nn.Module, batch_size: int, image_size: int | None) -> Workload:
    """V-JEPA 2: a clip of ``frames_per_clip`` frames from VJEPA2VideoProcessor (its crop the config's ``crop_size``,
    its resize edge in the processor's own ratio to it, 292 / 256); the model masks nothing (its all-patches
    context and target masks, made from the clip: known values). Training: the JEPA objective, L1 between the
    predictor's output and the encoder's target states, detached."""
    import numpy as np
    from torch.utils._python_dispatch import _disable_current_modes
    from transformers import VJEPA2VideoProcessor

    config: Any = model.config
    crop = int(image_size or config.crop_size)
    with _disable_current_modes():
        defaults: Any = VJEPA2VideoProcessor()
        edge = round(crop * int(defaults.size.shortest_edge) / int(defaults.crop_size.height))
        processor = VJEPA2VideoProcessor(size={"shortest_edge": edge}, crop_size={"height": crop, "width": crop})
        rng = np.random.default_rng(0)
        clips = [rng.integers(0, 256, (int(config.frames_per_clip), edge, edge, 3), dtype=np.uint8) for _ in range(batch_size)]
        real = as_model_dtype(model, {k: v.to("cpu") for k, v in processor(videos=clips, return_tensors="pt").items()})

    def jepa_loss(m: nn.Module, x: dict[str, torch.Tensor]) -> torch.Tensor:
        out = m(**x).predictor_output
        return torch.nn.functional.l1_loss(out.last_hidden_state, out.target_hidden_state.detach())

    return Workload(ModelKind.VISION_BASE, known_inputs_maker(real), jepa_loss, lambda m, x: m(**x),
                    f"{type(model).__name__}: VJEPA2VideoProcessor clip, {shapes_text(real)}; training: L1 of the predictor's "
                    "output to the detached target states", KnownValues, full_first_step=True)


def _prompt(length: int, vocab: int) -> torch.Tensor:
    """``[CLS] a thing . a thing . ... [SEP]`` over ``length`` tokens (BERT's ids, the words' clamped below ``vocab``)."""
    words = [min(_BERT_A, vocab - 1), min(_BERT_THING, vocab - 2), _BERT_DOT]
    body = [words[i % 3] for i in range(max(length - 2, 0))]
    if body and body[-1] != _BERT_DOT:
        body[-1] = _BERT_DOT
    return torch.tensor([[_BERT_CLS, *body, _BERT_SEP][:length]], dtype=torch.long)


def _images(model: nn.Module, processor_type: str, side: int | None, batch_size: int, extra: dict[str, torch.Tensor],
            what: str, context: Callable[[], Any] | None = None) -> Workload:
    """The processor's images (at ``side`` square, else its own size) and ``extra`` inputs, fed by name;
    training backpropagates the sum of the first output."""

    settings = {"size": {"height": side, "width": side}} if side else {}
    real = as_model_dtype(model, processed(processor_type, settings, batch_size, side or 800))
    real.update(extra)
    return replace(forward_all(ModelKind.VISION_BASE, known_inputs_maker(real), f"{what}: {shapes_text(real)}", context or KnownValues),
                   full_first_step=True)


@contextlib.contextmanager
def _rows_where() -> Iterator[None]:
    """The known-values mode, and ``torch.where(condition)`` on a condition computed from activations (OneFormer's
    ``attention_mask[torch.where(attention_mask.sum(-1) == attention_mask.shape[-1])] = False``: the queries whose
    predicted mask is empty) answered as if every element held: the ``nonzero`` output the CPU kernel allocates,
    ``(numel, dim)`` int64, at its largest (the real count depends on the weights' values; a few kilobytes)."""
    from torch._subclasses.fake_tensor import DataDependentOutputException, DynamicOutputShapeException

    where = torch.where

    def rows_where(condition: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        if args or kwargs:
            return where(condition, *args, **kwargs)
        try:
            return where(condition)
        except (DataDependentOutputException, DynamicOutputShapeException):
            return torch.zeros(condition.numel(), condition.dim(), dtype=torch.long).unbind(1)

    with KnownValues():
        torch.where = rows_where  # the one-argument form only; restored below
        try:
            yield
        finally:
            torch.where = where


def _loftr(model: nn.Module, batch_size: int, image_size: int | None) -> Workload:

    config: Any = model.config
    size = image_size or image_side(getattr(config, "image_size", None)) or 480
    real = as_model_dtype(model, processed("efficientloftr", {}, batch_size, size, pairs=True))

    def maps_loss(m: nn.Module, x: dict[str, torch.Tensor]) -> torch.Tensor:
        maps = m(**x).feature_maps  # the library takes no labels: a user's loss reads the features it returns
        return sum((t.float().sum() for t in maps), torch.zeros(()))

    return Workload(ModelKind.VISION_BASE, known_inputs_maker(real), maps_loss, lambda m, x: m(**x),
                    f"{type(model).__name__}: image pairs, {shapes_text(real)}; training backpropagates the sum of its feature maps",
                    KnownValues, full_first_step=True)
