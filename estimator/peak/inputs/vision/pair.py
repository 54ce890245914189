"""Workloads of models that take two kinds of input at once (a text and an image tower, boxes beside the tokens).

``workload(model, batch_size=, seq_len=, image_size=)`` returns a :class:`~estimator.peak.inputs.providers.Workload`
for the models this module knows, else None (the generic paths of :mod:`estimator.peak.inputs.providers` then run).

What a real user sends each (``B`` = batch size, ``L`` = tokens, ``S`` = image size, the vision
config's unless given):

- dual encoders (CLIP, MetaCLIP 2, SigLIP, AIMv2, AltCLIP, ALIGN, Chinese-CLIP, CLIPSeg, GroupViT, OWL-ViT, OWLv2,
  VisionTextDualEncoder, SAM 3): ``input_ids`` (B, L) and ``attention_mask`` beside ``pixel_values``
  (B, C, S, S); X-CLIP and VideoPrism: the clip's frames (B, T, C, S, S); CLAP: ``input_features``
  of its feature extractor run on random audio; CLVP: its feature extractor's mel ``input_features``.
  Training: the model's own contrastive loss (``return_loss=True``) where it has one.
- ViLT, BridgeTower: ``pixel_values`` and the all-ones ``pixel_mask`` beside the text.
- TVP: the text and the video frames (B, T, C, S, S).
- LXMERT: ``visual_feats`` (B, N, visual_feat_dim) and ``visual_pos`` (B, N, visual_pos_dim), N = 36
  detected objects (the Faster R-CNN features LXMERT was trained on).
- Bros, LayoutLMv3, LiLT: ``bbox`` (B, L, 4) of valid boxes (x0 <= x1, y0 <= y1) in the model's
  range (Bros: normalised floats; LayoutLMv3, LiLT: integers below ``max_2d_position_embeddings``);
  LayoutLMv3 also the page's ``pixel_values``.

Training backpropagates the model's loss where it makes one, else the sum of the first output. The
integer inputs (ids, masks) are fakes whose values are known (:mod:`estimator.peak.fakes.known_values`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from estimator.peak.fakes.known_inputs import known
from estimator.peak.fakes.known_values import KnownValues, know
from estimator.peak.inputs.generic import known_ids, ordinary_token
from estimator.peak.workload import ModelKind, Workload, accepts, first_tensor, model_dtype

if TYPE_CHECKING:
    from estimator.peak.workload import Workload

__all__ = ["Maker", "known", "known_boxes", "pair_workload", "text_inputs", "workload"]

Maker = Callable[[], dict[str, torch.Tensor]]

# model types whose forward wants a text and an image (or video, audio) at once
_DUAL = frozenset({"clip", "metaclip_2", "siglip", "aimv2", "altclip", "align", "bridgetower", "chinese_clip", "clipseg", "groupvit", "owlv2", "owlvit",
                   "sam3", "sam3_lite_text", "vision-text-dual-encoder", "xclip", "videoprism", "clap", "clvp",
                   "vilt", "tvp", "layoutlmv3"})
_BOXES = frozenset({"bros", "layoutlmv3", "lilt"})
_OBJECTS = 36  # LXMERT's detected objects per image (its Faster R-CNN features: 36 boxes)


def workload(model: nn.Module, *, batch_size: int, seq_len: int, image_size: int | None) -> Workload | None:
    """The workload of a model of :data:`_DUAL`, :data:`_BOXES` or LXMERT whose forward takes those inputs; else None
    (:mod:`estimator.peak.inputs.vision.pair_more` is asked before this module, by :func:`estimator.peak.inputs.providers.workload_for`)."""
    config: Any = getattr(model, "config", None)
    model_type = getattr(config, "model_type", None)
    if model_type not in _DUAL | _BOXES | {"lxmert"} or not accepts(model, "input_ids"):
        return None
    b = batch_size
    text = text_inputs(model, b, seq_len)
    parts = [text]
    if model_type in _BOXES and accepts(model, "bbox"):
        parts.append(_boxes(model, b, _text_len(model, seq_len)))
    if model_type == "lxmert":
        parts.append(_visual_feats(model, b))
    elif model_type in _DUAL:
        media = _media(model, b, image_size)
        if media is None:
            return None
        parts.append(media)
    return pair_workload(model, parts)


def _text_config(config: Any) -> Any:
    return getattr(config, "text_config", None) or config


def _text_len(model: nn.Module, seq_len: int) -> int:
    """``seq_len``, at most the text tower's positions (CLIP's 77; a RoBERTa-style tower's positions
    start after its padding id, so 514 positions hold 512 tokens)."""
    text: Any = _text_config(model.config)
    positions = getattr(text, "max_position_embeddings", None)
    if not isinstance(positions, int) or positions <= 0:
        return seq_len
    offset = 0
    for module in model.modules():
        padding = getattr(module, "padding_idx", None)
        if hasattr(module, "position_embeddings") and isinstance(padding, int):
            offset = padding + 1  # RoBERTa's create_position_ids_from_input_ids
            break
    return max(1, min(seq_len, positions - offset))


def text_inputs(model: nn.Module, b: int, seq_len: int) -> tuple[str, Maker]:
    """Ordinary tokens (no special id) with the all-ones mask, as a tokenizer pads a batch of equal prompts;
    ``seq_len`` tokens, at most the text tower's positions."""

    config: Any = model.config
    vocab = int(getattr(_text_config(config), "vocab_size", None) or 1000)
    token = ordinary_token(config, vocab)
    n = _text_len(model, seq_len)

    def make() -> dict[str, torch.Tensor]:
        return {"input_ids": known_ids((b, n), vocab, token), "attention_mask": known((b, n), 1)}

    capped = f" (seq_len {seq_len} capped at the text tower's positions)" if n < seq_len else ""
    return f"input_ids {b}x{n}{capped} + attention_mask", make


def _image_size(config: Any, image_size: int | None) -> tuple[int, int, int]:
    """(channels, height, width) of the vision tower's images: ``image_size`` or the config's."""
    vision = getattr(config, "vision_config", None)
    parts = [p for p in (vision, getattr(vision, "backbone_config", None), config) if p is not None]
    source = next((p for p in parts if getattr(p, "image_size", None) or getattr(p, "input_size", None)), config)
    size: Any = image_size or getattr(source, "image_size", None) or getattr(source, "input_size", None) or 224
    channels = int(next((p.num_channels for p in parts if getattr(p, "num_channels", None)), 3))
    if isinstance(size, (list, tuple)):
        return channels, int(size[0]), int(size[-1])
    return channels, int(size), int(size)


def _frames(config: Any) -> int | None:
    for part in (getattr(config, "vision_config", None), config):
        value = getattr(part, "num_frames", None) if part is not None else None
        if isinstance(value, int) and value > 0:
            return value
    return None


def _media(model: nn.Module, b: int, image_size: int | None) -> tuple[str, Maker] | None:
    """The image, video or audio input of a dual model."""
    config: Any = model.config
    dtype = model_dtype(model)
    if accepts(model, "input_features"):
        from estimator.peak.inputs.audio.pair_audio import audio_features

        return audio_features(model, b)
    c, h, w = _image_size(config, image_size)
    if config.model_type == "tvp":  # TvpImageProcessor pads every frame to the visual prompter's max_img_size
        h = w = int(config.max_img_size)
    key = "pixel_values_videos" if accepts(model, "pixel_values_videos") else "pixel_values"
    if not accepts(model, key):
        return None
    frames = _frames(config) if config.model_type in ("xclip", "videoprism", "tvp") else None
    shape = (b, c, h, w) if frames is None else (b, frames, c, h, w)
    with_mask = accepts(model, "pixel_mask")

    def make() -> dict[str, torch.Tensor]:
        made = {key: torch.randn(shape, dtype=dtype)}
        if with_mask:  # ViLT, BridgeTower: every pixel is real (one image size, no padding)
            made["pixel_mask"] = known((b, h, w), 1)
        return made

    words = f"{key} {'x'.join(map(str, shape))}" + (" + pixel_mask" if with_mask else "")
    return words, make


def _boxes(model: nn.Module, b: int, n: int) -> tuple[str, Maker]:
    """Valid boxes, one per token: (x0, y0, x1, y1) with x0 <= x1 and y0 <= y1, in the model's range."""
    config: Any = model.config
    if config.model_type == "bros":  # normalised coordinates (BrosProcessor's users divide by the page size)
        dtype = model_dtype(model)
        return f"bbox {b}x{n}x4 (normalised corners)", lambda: {"bbox": known_boxes(b, n, dtype)}
    top = int(getattr(config, "max_2d_position_embeddings", 1024) or 1024) - 1

    def integers() -> dict[str, torch.Tensor]:
        corner = torch.randint(0, top // 2 + 1, (b, n, 2))
        return {"bbox": torch.cat([corner, corner + torch.randint(0, top // 2 + 1, (b, n, 2))], dim=-1)}

    return f"bbox {b}x{n}x4 (corners below {top + 1})", integers


def known_boxes(b: int, n: int, dtype: torch.dtype) -> torch.Tensor:
    """Valid normalised boxes (x0 <= x1, y0 <= y1 in [0, 1]), the same ones each call, known inside a
    fake mode (a model may pick the image patches under each box: UDOP)."""
    from torch.utils._python_dispatch import _disable_current_modes

    with _disable_current_modes():
        rng = torch.Generator().manual_seed(0)
        corner = torch.rand(b, n, 2, generator=rng, device="cpu") * 0.5
        real = torch.cat([corner, corner + torch.rand(b, n, 2, generator=rng, device="cpu") * 0.5], dim=-1).to(dtype)
    made = torch.empty(b, n, 4, dtype=dtype)
    if not isinstance(made, torch._subclasses.fake_tensor.FakeTensor):
        return real
    return know(made, real)


def _visual_feats(model: nn.Module, b: int) -> tuple[str, Maker]:
    config: Any = model.config
    feat, pos = int(config.visual_feat_dim), int(config.visual_pos_dim)
    dtype = model_dtype(model)

    def make() -> dict[str, torch.Tensor]:
        return {"visual_feats": torch.randn(b, _OBJECTS, feat, dtype=dtype),
                "visual_pos": torch.rand(b, _OBJECTS, pos, dtype=dtype)}

    return f"visual_feats {b}x{_OBJECTS}x{feat} + visual_pos {b}x{_OBJECTS}x{pos}", make


def pair_workload(model: nn.Module, parts: list[tuple[str, Maker]], kind: ModelKind = ModelKind.TEXT_BASE) -> Workload:
    """Every part's inputs fed by name. Training: the model's loss on the ``labels`` a part gives (an
    image classifier's), else its contrastive loss (``return_loss=True``) where its forward has one,
    else the sum of the first output. Inference: one forward without the labels."""

    contrastive = accepts(model, "return_loss")

    def make_inputs() -> dict[str, torch.Tensor]:
        made: dict[str, torch.Tensor] = {}
        for _, make in parts:
            made.update(make())
        return made

    def train_loss(m: nn.Module, x: dict[str, torch.Tensor]) -> torch.Tensor:
        if "labels" in x:
            return m(**x).loss
        if contrastive:
            return m(**x, return_loss=True).loss
        return first_tensor(m(**x)).sum()

    def infer(m: nn.Module, x: dict[str, torch.Tensor]) -> Any:
        return m(**{k: v for k, v in x.items() if k != "labels"})

    words = " + ".join(w for w, _ in parts)
    loss = ("the model's loss on class labels" if "labels" in words else
            "the model's contrastive loss (return_loss=True)" if contrastive else "sum of the first output")
    return Workload(kind, make_inputs, train_loss, infer, f"{words}; training loss: {loss}", context=pair_context)


@contextlib.contextmanager
def pair_context() -> Iterator[None]:
    """The known input values (:class:`~estimator.peak.fakes.known_values.KnownValues`), and no argument
    validation in ``torch.distributions`` (GroupViT's Gumbel noise: the check reads a value to raise
    on a bad argument, which the model never passes; it allocates a few bytes)."""
    from torch.distributions import Distribution

    validate = Distribution._validate_args
    Distribution.set_default_validate_args(False)
    try:
        with KnownValues():
            yield
    finally:
        Distribution.set_default_validate_args(validate)
