"""What a processor family is (:class:`Family`), the inputs it makes (:class:`Media`, :class:`MediaInputs`) and
the stand-in tokenizer that knows a family's special tokens: the pieces the family tables
(:mod:`estimator.peak.inputs.prompts.processors`, :mod:`estimator.peak.inputs.prompts.image_families`, :mod:`estimator.peak.inputs.prompts.more_families`,
:mod:`estimator.peak.inputs.prompts.captioners`) and the audio modules share, below all of them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = ["Family", "Media", "MediaInputs", "plain_inputs"]

logger = logging.getLogger(__name__)

TEXT_ID = 5  # the id of every text word of the prompt ("a")
UNK_ID = 0


@dataclass(frozen=True)
class Media:
    """What the prompt carries besides text: ``images`` of ``image_size`` pixels square (None: the
    processor's own resolution), ``audio_seconds`` of audio."""

    images: int = 0
    image_size: int | None = None
    video_frames: int = 0
    audio_seconds: float | None = None
    # the repo's preprocessor_config.json / processor_config.json (None: built from the model config)
    preprocessor: dict[str, Any] | None = field(default=None, compare=False, hash=False)
    processor: dict[str, Any] | None = field(default=None, compare=False, hash=False)
    video_preprocessor: dict[str, Any] | None = field(default=None, compare=False, hash=False)  # video_preprocessor_config.json


@dataclass(frozen=True)
class MediaInputs:
    """The processor's output for one batch (real CPU tensors) and what it holds, in words."""

    tensors: dict[str, torch.Tensor]
    description: str
    image_tokens: int = 0  # per sample, in input_ids
    image_size: int | None = None
    known_pixels: bool = False  # pixel_values are asked about (Family.known_pixels)
    # the processor's values it leaves as Python lists or numbers (its skip_tensor_conversion: Unlimited-OCR's
    # num_local_patches and patches_grid), passed as they are to a forward that names them (plain_inputs)
    plain: dict[str, Any] = field(default_factory=dict)


def plain_inputs(model: Any, plain: dict[str, Any]) -> dict[str, Any]:
    """Those of ``plain`` (:attr:`MediaInputs.plain`) that ``model``'s forward names as parameters: what it reads
    from them (Unlimited-OCR: how many local tiles each image has, their grid) reaches it, and the rest (MiniCPM-V's
    ``grids``, read by its processor only) stays out of a forward that would pass them on through its ``**kwargs``."""
    import inspect

    named = inspect.signature(model.forward).parameters
    return {k: v for k, v in plain.items()
            if k in named and named[k].kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)}


def vision_config(config: Any) -> Any:
    return getattr(config, "vision_config", None)


def config_token_id(config: Any, *names: str) -> int | None:
    for name in names:
        name, _, index = name.partition("[")  # "visual_indicator_token_ids[2]": the third of a list (Ovis2)
        value = config
        for part in name.split("."):  # "vision_config.image_token_id": a sub-config's (Phi-4-multimodal)
            value = getattr(value, part, None)
        if value is None and getattr(config, "text_config", None) is not None:
            value = getattr(config.text_config, name, None)
        if index and isinstance(value, (list, tuple)):
            value = value[int(index[:-1])] if int(index[:-1]) < len(value) else None
        if isinstance(value, int):
            return value
    return None


@dataclass(frozen=True)
class Family:
    """How one model type's processor is built and prompted.

    ``tokens``: special token string -> the config attributes holding its id (empty: any free id);
    ``attributes``: tokenizer attributes the processor reads (``image_token``, ``boi_token``...);
    ``placeholder``: what the chat template writes in the prompt for one image;
    ``image_processor``: its settings from the model config, for repos without a preprocessor_config.json;
    ``processor``: the processor's own settings (processor_config.json) from the model config.
    """

    tokens: dict[str, tuple[str, ...]]
    placeholder: str
    attributes: dict[str, str] = field(default_factory=dict)
    image_processor: Callable[[Any], dict[str, Any]] = lambda config: {}
    processor: Callable[[Any], dict[str, Any]] = lambda config: {}
    default_size: Callable[[Any], int] = lambda config: int(getattr(vision_config(config), "image_size", 224))
    extra_tokens: Callable[[], list[str]] = list
    known_pixels: bool = False  # the model asks the pixels a question (Idefics3: which images are padding)
    # transformers class names where the auto mappings name none for the model type ("processor",
    # "image_processor", "video_processor": e.g. GLM-OCR's Glm46VProcessor)
    classes: dict[str, str] = field(default_factory=dict)
    # what the processor's call takes besides text and images, for prompts of n images (GOT-OCR2: pages, tokens)
    call_kwargs: Callable[[Any, int], dict[str, Any]] = lambda config, n: {}
    flat_single: bool = False  # one image per prompt is passed as a flat list (GOT-OCR2 nests only pages)
    one_placeholder: bool = False  # one placeholder stands for all of a prompt's images (GOT-OCR2's pages)
    pil: bool = False  # the processor takes PIL images only (Idefics2 loads them)
    # tokens the repo's SentencePiece vocabulary holds as ordinary pieces (Fuyu's |SPEAKER| and |NEWLINE|): the
    # stand-in reads them as SentencePiece does, after the "▁" it writes at the start of each piece of text
    pieces: tuple[str, ...] = ()
    # the processor run by the family itself (proc, config, images per prompt, text tokens) -> its output, where the
    # prompt is not ``placeholder`` * images + text (Idefics' interleaved lists, captioners' decoder text)
    call: Callable[[Any, Any, list[Any], int], Any] | None = None
    decoder_text: bool = False  # the text is the decoder's (captioners): the call's ``labels`` are kept


def qwen_image_settings(config: Any) -> dict[str, Any]:
    vision = vision_config(config)
    return {"patch_size": vision.patch_size, "merge_size": vision.spatial_merge_size,
            "temporal_patch_size": vision.temporal_patch_size}


def family_tokenizer(config: Any, family: Family) -> Any:
    """A word-level tokenizer knowing the family's special tokens under the config's ids; every other word is one text token."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab_size = int(getattr(config.get_text_config(), "vocab_size", 1000) or 1000)
    vocab = {"[UNK]": UNK_ID, "a": TEXT_ID}
    free = iter(i for i in range(TEXT_ID + 1, 1 << 30) if i not in set(vocab.values()))
    specials = [*family.tokens, *family.extra_tokens()]
    taken = {config_token_id(config, *family.tokens.get(s, ())) for s in specials} - {None}
    for token in specials:
        known = config_token_id(config, *family.tokens.get(token, ()))
        if known is None:
            known = next(i for i in free if i not in taken)
        vocab[token] = known
    if max(vocab.values()) >= max(vocab_size, 1) + 1024:
        logger.debug("special token ids beyond the text vocabulary: %s", vocab)
    model = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    model.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    if family.pieces:
        spare = (i for i in free if i not in taken)
        _sentencepiece_like(model, vocab, family.pieces, [next(spare), next(spare)])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=model, unk_token="[UNK]", extra_special_tokens=dict(family.attributes))
    tokenizer.add_tokens([s for s in specials if s not in family.pieces], special_tokens=True)
    for name, token in family.attributes.items():
        if name == "bos_token":
            tokenizer.bos_token = token
    if tokenizer.pad_token is None:  # the prompts of a batch are alike: padding (Aya Vision asks for it) adds nothing
        tokenizer.pad_token = "[UNK]"
    return tokenizer


def _sentencepiece_like(model: Any, vocab: dict[str, int], pieces: tuple[str, ...], free_ids: list[int]) -> None:
    """Make ``model`` read ``pieces`` inside text as SentencePiece does: each run of text gets a leading "▁"
    (alone before a piece, "▁a" joined to a first word: one text token), the pieces split out as tokens."""
    import re

    from tokenizers import Regex, models, normalizers, pre_tokenizers

    vocab.update({"▁": free_ids[0], "▁a": free_ids[1]})
    model.model = models.WordLevel(vocab, unk_token="[UNK]")
    model.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace("▁ ", "▁")])
    split = pre_tokenizers.Split(Regex("|".join(map(re.escape, pieces))), behavior="isolated")
    model.pre_tokenizer = pre_tokenizers.Sequence([split, pre_tokenizers.WhitespaceSplit()])
