"""Image and audio inputs as the model's own processor makes them, without the repo's tokenizer or code.

A vision-language model is fed what its transformers processor returns for a prompt with images:
``pixel_values`` (and the grid, tiles, masks its image processor adds) and ``input_ids`` where each
image became the processor's run of image tokens (Gemma-3's ``<start_of_image>`` + 256 soft tokens +
``<end_of_image>``, Qwen-VL's ``<|image_pad|>`` times the merged patches of the image's grid,
Idefics3's tiles with their row/column tags, Mllama's one ``<|image|>`` per image and its cross-attention
mask). The processor is the real class transformers maps the ``model_type`` to, its image processor
built from the repo's ``preprocessor_config.json`` (else from the model config: the vision tower's
image size and patching), and it is run on random images of the size asked. Only the tokenizer is a
stand-in: a word-level tokenizer that knows the processor's special tokens under the ids the model
config gives them and reads every other word as one text token, so the prompt is ``images`` + ``seq_len``
text tokens. Speech models get the feature extractor's ``input_features`` for random audio of the
length asked (:mod:`estimator.peak.inputs.audio.features`).

Nothing here runs a repository's code: classes come from transformers by ``model_type``, settings from JSON.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

import numpy as np
import torch

__all__ = ["FAMILIES", "Media", "MediaInputs", "family_of", "images_simulated", "media_inputs"]

from estimator.peak.inputs.prompts.family import (  # noqa: F401 - re-exported: the names this module always had
    TEXT_ID,
    UNK_ID,
    Family,
    Media,
    MediaInputs,
    config_token_id,
    family_tokenizer,
    qwen_image_settings,
    vision_config,
)
from estimator.peak.inputs.prompts.image_families import image_families
from estimator.peak.inputs.prompts.more_families import more_families
from estimator.peak.inputs.prompts.video import VIDEO_PLACEHOLDERS, frame_size, video_call, video_processor, video_simulated, video_words

logger = logging.getLogger(__name__)

def _square(config: Any) -> dict[str, Any]:
    size = int(vision_config(config).image_size)
    return {"size": {"height": size, "width": size}}


def _llava_processor(config: Any) -> dict[str, Any]:
    vision = vision_config(config)
    cls_token = 1 if getattr(vision, "model_type", "") == "clip_vision_model" else 0
    return {"patch_size": vision.patch_size, "vision_feature_select_strategy": config.vision_feature_select_strategy,
            "num_additional_image_tokens": cls_token}


def _llava_image(config: Any) -> dict[str, Any]:
    size = int(vision_config(config).image_size)
    return {"size": {"shortest_edge": size}, "crop_size": {"height": size, "width": size}}


def _idefics_image(config: Any) -> dict[str, Any]:
    size = int(vision_config(config).image_size)
    return {"size": {"longest_edge": 4 * size}, "max_image_size": {"longest_edge": size}}


def _idefics_processor(config: Any) -> dict[str, Any]:
    vision = vision_config(config)
    return {"image_seq_len": int((vision.image_size // vision.patch_size) ** 2 / config.scale_factor**2)}


def _row_col_tags() -> list[str]:
    return ["<global-img>", *(f"<row_{i + 1}_col_{j + 1}>" for i in range(6) for j in range(6))]


def _mllama_image(config: Any) -> dict[str, Any]:
    vision = vision_config(config)
    return {**_square(config), "max_image_tiles": vision.max_num_tiles}


def _paligemma_image(config: Any) -> dict[str, Any]:
    vision = vision_config(config)
    return {**_square(config), "image_seq_length": (vision.image_size // vision.patch_size) ** 2}


_QWEN = Family(
    tokens={"<|image_pad|>": ("image_token_id",), "<|video_pad|>": ("video_token_id",),
            "<|vision_start|>": ("vision_start_token_id",), "<|vision_end|>": ("vision_end_token_id",)},
    placeholder="<|vision_start|><|image_pad|><|vision_end|>",
    attributes={"image_token": "<|image_pad|>", "video_token": "<|video_pad|>"},
    image_processor=qwen_image_settings,
    default_size=lambda config: 448,
)
_IDEFICS = Family(
    tokens={"<image>": ("image_token_id",), "<fake_token_around_image>": (), "<end_of_utterance>": ()},
    placeholder="<image>",
    attributes={"image_token": "<image>"},
    image_processor=_idefics_image,
    processor=_idefics_processor,
    extra_tokens=_row_col_tags,
    known_pixels=True,
)

# model_type -> its processor family; the coverage of this table is what gets images.
FAMILIES: dict[str, Family] = {
    "llava": Family(tokens={"<image>": ("image_token_id", "image_token_index")}, placeholder="<image>",
                    attributes={"image_token": "<image>"}, image_processor=_llava_image, processor=_llava_processor),
    "gemma3": Family(
        tokens={"<start_of_image>": ("boi_token_index", "boi_token_id"), "<image_soft_token>": ("image_token_id", "image_token_index"),
                "<end_of_image>": ("eoi_token_index", "eoi_token_id")},
        placeholder="<start_of_image>",
        attributes={"boi_token": "<start_of_image>", "image_token": "<image_soft_token>", "eoi_token": "<end_of_image>"},
        image_processor=_square, processor=lambda config: {"image_seq_length": config.mm_tokens_per_image},
    ),
    "paligemma": Family(tokens={"<image>": ("image_token_id", "image_token_index"), "<bos>": ("bos_token_id",)}, placeholder="",
                        attributes={"image_token": "<image>", "bos_token": "<bos>"}, image_processor=_paligemma_image),
    "qwen2_vl": _QWEN,
    "qwen2_5_vl": _QWEN,
    "qwen3_vl": _QWEN,
    "qwen3_vl_moe": _QWEN,
    "qwen3_5": _QWEN,  # Qwen3.5 and its MoE take Qwen3VLProcessor
    "qwen3_5_moe": _QWEN,
    "idefics3": _IDEFICS,
    "smolvlm": _IDEFICS,
    "mllama": Family(tokens={"<|image|>": ("image_token_id", "image_token_index"), "<|begin_of_text|>": ("bos_token_id",),
                             "<|python_tag|>": ()},
                     placeholder="<|image|>", attributes={"image_token": "<|image|>", "bos_token": "<|begin_of_text|>"},
                     image_processor=_mllama_image),
}


@functools.cache
def _other_families() -> dict[str, Family]:

    return {**image_families(), **more_families()}


def lookup(model_type: str) -> Family | None:
    """The processor family of ``model_type``: this module's table, then :mod:`estimator.peak.inputs.prompts.image_families`
    and :mod:`estimator.peak.inputs.prompts.more_families`."""
    return FAMILIES.get(model_type) or _other_families().get(model_type)


def family_of(config: Any) -> Family | None:
    return lookup(getattr(config, "model_type", ""))


def images_simulated(model_type: str) -> bool:
    """Whether prompts of ``model_type`` get images made by its processor (else: refused with ``--images``)."""
    return lookup(model_type) is not None


def simulated_image_types() -> list[str]:
    """The model types whose prompts get images, for messages."""
    return sorted({*FAMILIES, *_other_families()})


def _image_processor(model_type: str, family: Family, config: Any, settings: dict[str, Any] | None) -> Any:
    from transformers.models.auto.image_processing_auto import IMAGE_PROCESSOR_MAPPING_NAMES, get_image_processor_class_from_name

    names = IMAGE_PROCESSOR_MAPPING_NAMES.get(model_type) or IMAGE_PROCESSOR_MAPPING_NAMES.get(_sibling(model_type)) or {}
    name = family.classes.get("image_processor") or names.get("torchvision") or names.get("pil")
    if name is None:
        raise ValueError(f"transformers has no image processor for {model_type}")
    cls = get_image_processor_class_from_name(name)
    if settings:
        clean = {k: v for k, v in settings.items() if k not in ("image_processor_type", "processor_class", "auto_map")}
        return cls(**clean)
    return cls(**family.image_processor(config))


def _sibling(model_type: str) -> str:
    """A model type sharing ``model_type``'s processor class that has its own image and video processors
    (Qwen3-VL-MoE's are Qwen3-VL's): transformers maps only the base type to them."""
    from transformers.models.auto.image_processing_auto import IMAGE_PROCESSOR_MAPPING_NAMES
    from transformers.models.auto.processing_auto import PROCESSOR_MAPPING_NAMES

    name = PROCESSOR_MAPPING_NAMES.get(model_type)
    return next((t for t, n in PROCESSOR_MAPPING_NAMES.items() if n == name and t in IMAGE_PROCESSOR_MAPPING_NAMES), model_type)


def _processor(model_type: str, family: Family, config: Any, image_processor: Any, settings: dict[str, Any] | None,
               preprocessor: dict[str, Any] | None = None, video_preprocessor: dict[str, Any] | None = None) -> Any:
    import transformers
    from transformers.models.auto.processing_auto import PROCESSOR_MAPPING_NAMES

    cls = getattr(transformers, family.classes.get("processor") or PROCESSOR_MAPPING_NAMES[model_type])
    kwargs = dict(family.processor(config))
    if settings:
        kwargs.update({k: v for k, v in settings.items() if k not in ("processor_class", "auto_map", "chat_template")})
    if "video_processor" in cls.get_attributes():
        if video_simulated(model_type):  # set as from_pretrained sets it (estimator.peak.inputs.prompts.video)
            kwargs["video_processor"] = video_processor(model_type, family, config, video_preprocessor or preprocessor, settings,
                                                        _sibling(model_type))
        else:
            kwargs["video_processor"] = _video_processor(model_type, family, config)
    return cls(image_processor=image_processor, tokenizer=family_tokenizer(config, family), **kwargs)


def _video_processor(model_type: str, family: Family, config: Any) -> Any:
    import transformers
    from transformers.models.auto.video_processing_auto import VIDEO_PROCESSOR_MAPPING_NAMES

    names = VIDEO_PROCESSOR_MAPPING_NAMES.get(model_type) or VIDEO_PROCESSOR_MAPPING_NAMES.get(_sibling(model_type)) or {}
    cls = getattr(transformers, family.classes.get("video_processor") or next(iter(names.values())))
    return cls(**{k: v for k, v in family.image_processor(config).items() if k in ("patch_size", "merge_size", "temporal_patch_size")})


def media_inputs(
    config: Any,
    media: Media,
    *,
    batch_size: int,
    text_len: int,
    seed: int = 0,
) -> MediaInputs:
    """The processor's inputs for ``batch_size`` prompts of ``media.images`` images and ``text_len``
    text tokens (see the module docstring)."""
    preprocessor, processor = media.preprocessor, media.processor
    model_type = getattr(config, "model_type", "")
    family = lookup(model_type)
    if family is None:
        raise ValueError(f"images are not simulated for {model_type or type(config).__name__} models")
    image_processor = _image_processor(model_type, family, config, preprocessor)
    proc = _processor(model_type, family, config, image_processor, processor, preprocessor, media.video_preprocessor)
    size = media.image_size or _processor_size(image_processor) or family.default_size(config)
    video: dict[str, Any] = {}
    if media.video_frames:  # one video per prompt (estimator.peak.inputs.prompts.video), after the images, before the text
        if not video_simulated(model_type) or family.call is not None:
            raise ValueError(f"video is not simulated for {model_type} models")
        frame = media.image_size or frame_size(proc) or family.default_size(config)
        video = video_call(proc, media.video_frames, frame, batch_size, np.random.default_rng(seed + 1))
    rng = np.random.default_rng(seed)
    images: list[Any] = [[_image(rng, size, family.pil) for _ in range(media.images)] for _ in range(batch_size)]
    if family.flat_single and media.images == 1:
        images = [sample[0] for sample in images]
    if family.call is not None:
        out = family.call(proc, config, images if media.images else [[] for _ in range(batch_size)], text_len)
    else:
        prompt = (family.placeholder * (min(media.images, 1) if family.one_placeholder else media.images)
                  + (VIDEO_PLACEHOLDERS[model_type] if video else "") + " a" * text_len)
        out = proc(text=[prompt] * batch_size, images=images if media.images else None, return_tensors="pt",
                   **family.call_kwargs(config, media.images), **video)
    tensors = {k: v for k, v in out.items() if isinstance(v, torch.Tensor)}
    plain = {k: v for k, v in out.items() if not isinstance(v, torch.Tensor) and v is not None}
    if not family.decoder_text:
        tensors.pop("labels", None)  # PaliGemma's processor makes them for a suffix; training passes its own
    tensors.pop("attention_mask", None)  # no padding: generate's own all-ones mask (inputs.generate_kwargs)
    ids = tensors.get("input_ids")
    image_token = family.attributes.get("image_token", family.placeholder) or next(iter(family.tokens), "")
    image_id = proc.tokenizer.convert_tokens_to_ids(image_token) if image_token else None
    counted = media.images or media.video_frames
    per_sample = int((ids[0] == image_id).sum()) if counted and ids is not None and image_id is not None else 0
    if media.images and "image_embeds_position_mask" in tensors:  # Kosmos-2(.5): the image's positions are flagged
        per_sample = int(tensors["image_embeds_position_mask"][0].sum())
    shapes = ", ".join(f"{k} {'x'.join(map(str, v.shape))}" for k, v in tensors.items())
    words = (f"{media.images} image{'s' if media.images != 1 else ''} of {size}x{size} px per prompt, {per_sample} image tokens "
             f"+ {text_len} text tokens ({type(proc).__name__}; {shapes})")
    if video:
        video_token = family.attributes.get("video_token")
        video_id = proc.tokenizer.convert_tokens_to_ids(video_token) if video_token else None
        video_tokens = int((ids[0] == video_id).sum()) if ids is not None and isinstance(video_id, int) else 0
        shared = video_tokens == 0  # InternVL, GLM-4V, SmolVLM write their frames as image tokens: counted together
        what = video_words(media.video_frames, int(video["videos"][0].shape[1]), per_sample if shared else video_tokens, shared)
        head = "" if not media.images else (f"{media.images} image{'s' if media.images != 1 else ''} of {size}x{size} px per prompt"
                                            f"{'' if shared else f', {per_sample} image tokens'}, ")
        words = f"{head}{what} + {text_len} text tokens ({type(proc).__name__}; {shapes})"
        per_sample += 0 if shared else video_tokens
    return MediaInputs(tensors, words, per_sample, size, family.known_pixels, plain)


def _image(rng: np.random.Generator, size: int, pil: bool) -> Any:
    """A random RGB image of ``size`` pixels square (a PIL image where the processor takes only those)."""
    pixels = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
    if pil:
        from PIL import Image

        return Image.fromarray(pixels)
    return pixels


def _processor_size(image_processor: Any) -> int | None:
    """The resolution a fixed-size image processor resizes to (None where it keeps the image's size)."""
    size = getattr(image_processor, "size", None) or {}
    if not isinstance(size, dict):
        size = dict(size)
    for key in ("height", "shortest_edge"):
        if isinstance(size.get(key), int) and "longest_edge" not in size:
            return int(size[key])
    max_size = getattr(image_processor, "max_image_size", None) or {}
    if isinstance(max_size, dict) and isinstance(max_size.get("longest_edge"), int):
        return int(max_size["longest_edge"])
    return None
