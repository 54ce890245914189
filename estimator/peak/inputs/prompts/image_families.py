"""The processor families of the LLaVA-like, InternVL-like, Pixtral-like and other single-tower
vision-language models (see :class:`estimator.peak.inputs.prompts.processors.Family`).

Each family says which special tokens its transformers processor writes (and which config attribute
holds each one's id), and how its image processor and processor are set from the model config when the
repo has no ``preprocessor_config.json`` / ``processor_config.json``: the vision tower's ``image_size``
and ``patch_size``, the projector's downsampling (``downsample_factor``, ``downsample_ratio``,
``spatial_merge_size``, ``scale_factor``), ``vision_feature_select_strategy`` and the number of image
tokens the model expects (``image_seq_length``, ``mm_tokens_per_image``, ``num_image_tokens``). The
image processor and processor classes are transformers' own, by ``model_type``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from estimator.peak.inputs.prompts.family import Family, qwen_image_settings

if TYPE_CHECKING:
    from estimator.peak.inputs.prompts.family import Family

__all__ = ["image_families"]


def vision_of(config: Any) -> Any:
    """The vision tower's config (an encoder-decoder's is in its encoder: T5Gemma2)."""
    vision = getattr(config, "vision_config", None)
    if vision is None and getattr(config, "encoder", None) is not None:
        vision = getattr(config.encoder, "vision_config", None)
    return vision


def _side(value: Any) -> int:
    """A square side from an int or a (height, width) pair."""
    if isinstance(value, (list, tuple)):
        return int(value[0])
    if isinstance(value, dict):
        return int(value.get("height") or next(iter(value.values())))
    return int(value)


def image_side(config: Any) -> int:
    return _side(getattr(vision_of(config), "image_size", None) or getattr(config, "image_size", 224))


def patch_side(config: Any) -> int:
    return _side(getattr(vision_of(config), "patch_size", None) or getattr(config, "patch_size", 14))


def _get(config: Any, name: str, default: Any = None) -> Any:
    """``name`` on the config, else on its encoder (T5Gemma2), else ``default``."""
    value = getattr(config, name, None)
    if value is None and getattr(config, "encoder", None) is not None:
        value = getattr(config.encoder, name, None)
    return default if value is None else value


def square(config: Any) -> dict[str, Any]:
    size = image_side(config)
    return {"size": {"height": size, "width": size}}


def shortest_and_crop(config: Any) -> dict[str, Any]:
    """CLIP-style: resize the shortest edge to the tower's size, center-crop a square of it."""
    size = image_side(config)
    return {"size": {"shortest_edge": size}, "crop_size": {"height": size, "width": size}}


def _cls_tokens(config: Any) -> int:
    """The tokens the vision tower adds before its patches: CLIP's class token."""
    return 1 if getattr(vision_of(config), "model_type", "") == "clip_vision_model" else 0


def llava_processor(config: Any) -> dict[str, Any]:
    """LlavaProcessor and its kin: tokens per image = patches (+ CLS, dropped by the "default" strategy)."""
    strategy = getattr(config, "vision_feature_select_strategy", None) or "default"  # VipLlava drops the CLS token
    return {"patch_size": patch_side(config), "vision_feature_select_strategy": strategy,
            "num_additional_image_tokens": _cls_tokens(config)}


_IMAGE_IDS: tuple[str, ...] = ("image_token_id", "image_token_index")
_VIDEO_IDS: tuple[str, ...] = ("video_token_id", "video_token_index")


def _llava_like(image_processor: Any = shortest_and_crop, processor: Any = llava_processor, video: bool = False) -> Family:

    tokens = {"<image>": _IMAGE_IDS, **({"<video>": _VIDEO_IDS} if video else {})}
    attributes = {"image_token": "<image>", **({"video_token": "<video>"} if video else {})}
    return Family(tokens=tokens, placeholder="<image>", attributes=attributes, image_processor=image_processor,
                  processor=processor, default_size=image_side)


def _llava_next_image(config: Any) -> dict[str, Any]:
    return {**shortest_and_crop(config), "image_grid_pinpoints": config.image_grid_pinpoints}


def _onevision_image(config: Any) -> dict[str, Any]:
    return {**square(config), "image_grid_pinpoints": config.image_grid_pinpoints}


def _onevision_processor(config: Any) -> dict[str, Any]:
    return {"num_image_tokens": (image_side(config) // patch_side(config)) ** 2,
            "vision_feature_select_strategy": config.vision_feature_select_strategy,
            "vision_aspect_ratio": getattr(config, "vision_aspect_ratio", "anyres_max_9")}


def _inkling_image(config: Any) -> dict[str, Any]:
    """Inkling's image processor "size": the pixels of one image token, Inkling 2's spatial_merge_size patches a side,
    Inkling's one patch (no merge: its defaults, 40 px, are the processor's 40)."""
    vision = vision_of(config)
    side = int(getattr(vision, "spatial_merge_size", None) or 1) * patch_side(config)
    return {"size": {"height": side, "width": side}}


def _pixtral_image(config: Any) -> dict[str, Any]:
    patch = patch_side(config)
    return {"size": {"longest_edge": image_side(config)}, "patch_size": {"height": patch, "width": patch}}


def _pixtral_processor(config: Any) -> dict[str, Any]:
    return {"patch_size": patch_side(config), "spatial_merge_size": int(getattr(config, "spatial_merge_size", 1) or 1)}


def _pixtral_like(image_ids: tuple[str, ...] = _IMAGE_IDS) -> Family:

    return Family(tokens={"[IMG]": image_ids, "[IMG_BREAK]": (), "[IMG_END]": ()}, placeholder="[IMG]",
                  attributes={"image_token": "[IMG]", "image_break_token": "[IMG_BREAK]", "image_end_token": "[IMG_END]"},
                  image_processor=_pixtral_image, processor=_pixtral_processor, default_size=image_side)


def _internvl_processor(config: Any) -> dict[str, Any]:
    """The tokens of one tile: the tower's patch grid, pixel-shuffled by ``downsample_ratio`` (as the model's
    ``pixel_shuffle`` does: 448 px, 14 px patches, ratio 0.5 -> 256, the ``image_seq_length`` of real configs)."""
    side = int(image_side(config) // patch_side(config) * config.downsample_ratio)
    return {"image_seq_length": side * side}


def _internvl_like(video: bool = True) -> Family:

    tokens = {"<IMG_CONTEXT>": _IMAGE_IDS, "<img>": (), "</img>": (), **({"<video>": _VIDEO_IDS} if video else {})}
    attributes = {"context_image_token": "<IMG_CONTEXT>", "image_token": "<IMG_CONTEXT>", "start_image_token": "<img>",
                  "end_image_token": "</img>", "video_token": "<video>"}
    return Family(tokens=tokens, placeholder="<IMG_CONTEXT>" if video else "<image>", attributes=attributes,
                  image_processor=square, processor=_internvl_processor, default_size=image_side)


def _aya_processor(config: Any) -> dict[str, Any]:
    return {"patch_size": patch_side(config), "img_size": image_side(config), "downsample_factor": int(config.downsample_factor)}


def _cohere2_image(config: Any) -> dict[str, Any]:
    side = image_side(config) // patch_side(config) // int(config.downsample_factor)  # tokens per tile side
    return {**square(config), "patch_size": side}


def _gemma3_processor(config: Any) -> dict[str, Any]:
    return {"image_seq_length": int(_get(config, "mm_tokens_per_image"))}


def _gemma3_like(processor: str | None = None) -> Family:
    """Gemma-3's image tokens; ShieldGemma2's processor writes its policy prompt with the repo's chat template
    and then expands the images as its parent ``Gemma3Processor`` does, which is the class run here."""

    return Family(
        tokens={"<start_of_image>": ("boi_token_index", "boi_token_id"), "<image_soft_token>": _IMAGE_IDS,
                "<end_of_image>": ("eoi_token_index", "eoi_token_id")},
        placeholder="<start_of_image>",
        attributes={"boi_token": "<start_of_image>", "image_token": "<image_soft_token>", "eoi_token": "<end_of_image>"},
        image_processor=square, processor=_gemma3_processor, default_size=image_side,
        classes={"processor": processor} if processor else {})


def _num_image_tokens(config: Any) -> dict[str, Any]:
    """Janus / DeepSeek-VL: a fixed run of image tokens, one per patch of the (low-resolution) tower."""
    vision = vision_of(config)
    count = getattr(vision, "num_image_tokens", None) or (image_side(config) // patch_side(config)) ** 2
    return {"num_image_tokens": int(count)}


def _deepseek_hybrid_image(config: Any) -> dict[str, Any]:
    high = _side(config.high_res_vision_config.image_size)
    return {**square(config), "high_res_size": {"height": high, "width": high}}


def _idefics2_image(config: Any) -> dict[str, Any]:
    size = image_side(config)
    return {"size": {"shortest_edge": size, "longest_edge": size}, "do_image_splitting": False}


def _idefics2_processor(config: Any) -> dict[str, Any]:
    return {"image_seq_len": int(config.perceiver_config.resampler_n_latents)}


def _docling_processor(config: Any) -> dict[str, Any]:
    scale = int(getattr(vision_of(config), "scale_factor", None) or getattr(config, "scale_factor", None) or 1)
    return {"image_seq_len": int((image_side(config) // patch_side(config)) ** 2 / scale**2)}


def _fuyu_image(config: Any) -> dict[str, Any]:
    size, patch = image_side(config), patch_side(config)
    return {"size": {"height": size, "width": size}, "patch_size": {"height": patch, "width": patch}}


def _got_pages(config: Any, images: int) -> dict[str, Any]:
    """GOT-OCR2: a prompt of several images is one multi-page document; each page is the tower's patch grid
    after the projector's two stride-2 convolutions (1024 px, 16 px patches -> 16x16 = 256 tokens)."""
    side = image_side(config) // patch_side(config)
    for _ in range(2):
        side = -(-side // 2)
    return {"num_image_tokens": side * side, "multi_page": images > 1}


def _ovis2_processor(config: Any) -> dict[str, Any]:
    vision = vision_of(config)
    stride = int(getattr(vision, "hidden_stride", 1) or 1)
    side = -(-(image_side(config) // patch_side(config)) // stride)
    return {"image_seq_length": side * side}


# Ovis2's visual indicator tokens, in the order of the config's ``visual_indicator_token_ids``
_OVIS_INDICATORS = {token: (f"visual_indicator_token_ids[{i}]",)
                    for i, token in enumerate(("<IMG_START>", "<IMG_GRID>", "<IMG_COL>", "<IMG_ROW>", "<IMG_END>"))}


def _llama4_processor(config: Any) -> dict[str, Any]:
    return {"patch_size": patch_side(config), "pixel_shuffle_ratio": float(vision_of(config).pixel_shuffle_ratio)}


def image_families() -> dict[str, Family]:
    """model_type -> its processor family."""

    llava_next = _llava_like(_llava_next_image)
    internvl = _internvl_like()
    janus_tokens = {"<image_placeholder>": _IMAGE_IDS, "<begin_of_image>": (), "<end_of_image>": ()}
    janus_attributes = {"image_token": "<image_placeholder>", "boi_token": "<begin_of_image>", "eoi_token": "<end_of_image>"}
    return {
        "llava_next": llava_next,
        "llava_next_video": _llava_like(_llava_next_image, video=True),
        "llava_onevision": _llava_like(_onevision_image, _onevision_processor, video=True),
        "video_llava": _llava_like(video=True),
        "vipllava": _llava_like(),
        "aya_vision": Family(
            tokens={"<|IMG_PATCH|>": _IMAGE_IDS, "<|START_OF_IMG|>": (), "<|END_OF_IMG|>": (), "<|IMG_LINE_BREAK|>": (),
                    "TILE": (), "TILE_GLOBAL": ()},
            placeholder="<image>", attributes={"image_token": "<|IMG_PATCH|>"}, image_processor=square,
            processor=_aya_processor, default_size=image_side),
        "cohere2_vision": Family(
            tokens={"<|IMG_PATCH|>": _IMAGE_IDS, "<|START_OF_IMG|>": (), "<|END_OF_IMG|>": (), "<|IMG_LINE_BREAK|>": ()},
            placeholder="<|IMG_PATCH|>",
            attributes={"image_token": "<|IMG_PATCH|>", "boi_token": "<|START_OF_IMG|>", "eoi_token": "<|END_OF_IMG|>",
                        "img_line_break_token": "<|IMG_LINE_BREAK|>"},
            image_processor=_cohere2_image, default_size=image_side),
        # Aria: AriaProcessor expands "<|img|>" to crops x the queries its size_conversion gives the crop side
        # (490 px: 128, 980 px: 256, AriaImageProcessor's default max_image_size 980)
        "aria": Family(tokens={"<|img|>": _IMAGE_IDS}, placeholder="<|img|>", attributes={"image_token": "<|img|>"},
                       default_size=lambda config: 980),
        # Inkling 2 / Inkling: the processor writes image_grid_thw.prod() image tokens; the image processor's "size"
        # is the pixels of one such token (spatial_merge_size patches a side); Inkling's also its audio extractor
        "inkling2": Family(tokens={"<|unused_200054|>": _IMAGE_IDS}, placeholder="<|unused_200054|>",
                           attributes={"image_token": "<|unused_200054|>"}, image_processor=_inkling_image,
                           default_size=lambda config: 448),
        "inkling_mm_model": Family(
            tokens={"<|unused_200054|>": _IMAGE_IDS, "<|content_image|>": ("image_bos_token_id",),
                    "<|unused_200053|>": ("audio_token_id",), "<|content_audio_input|>": ("audio_bos_token_id",)},
            placeholder="<|unused_200054|>", attributes={"image_token": "<|unused_200054|>", "audio_token": "<|unused_200053|>"},
            image_processor=_inkling_image, default_size=lambda config: 448,
            processor=lambda config: {"feature_extractor": __import__("transformers").InklingFeatureExtractor()}),
        "mistral3": _pixtral_like(),
        "lighton_ocr": _pixtral_like(),
        "mistral_large4": _pixtral_like(),
        # Llama-4: "<|image|>" becomes its tiles of "<|patch|>" tokens (the config's image token) with separators
        "llama4": Family(tokens={"<|patch|>": _IMAGE_IDS, "<|image_start|>": ("boi_token_id", "boi_token_index"),
                                 "<|image|>": (), "<|image_end|>": (), "<|tile_x_separator|>": (), "<|tile_y_separator|>": ()},
                         placeholder="<|image|>", attributes={"image_token": "<|patch|>"}, image_processor=square,
                         processor=_llama4_processor, default_size=image_side),
        "internvl": internvl,
        "qianfan_ocr": _internvl_like(video=False),
        "got_ocr2": Family(tokens={"<imgpad>": _IMAGE_IDS, "<img>": (), "</img>": (), "<|im_start|>": (), "<|im_end|>": ()},
                           placeholder="<imgpad>", attributes={"image_token": "<imgpad>"}, image_processor=square,
                           default_size=image_side, call_kwargs=_got_pages, flat_single=True,
                           one_placeholder=True),
        "shieldgemma2": _gemma3_like(processor="Gemma3Processor"),
        "t5gemma2": _gemma3_like(),
        "janus": Family(tokens=janus_tokens, placeholder="<image_placeholder>", attributes=janus_attributes,
                        image_processor=square, processor=_num_image_tokens, default_size=image_side),
        "deepseek_vl": Family(tokens={"<image_placeholder>": _IMAGE_IDS}, placeholder="<image_placeholder>",
                              attributes={"image_token": "<image_placeholder>"}, image_processor=square,
                              processor=_num_image_tokens, default_size=image_side),
        "deepseek_vl_hybrid": Family(tokens={"<image_placeholder>": _IMAGE_IDS}, placeholder="<image_placeholder>",
                                     attributes={"image_token": "<image_placeholder>"}, image_processor=_deepseek_hybrid_image,
                                     processor=_num_image_tokens, default_size=image_side),
        "idefics2": Family(tokens={"<image>": _IMAGE_IDS, "<fake_token_around_image>": (), "<end_of_utterance>": ()},
                           placeholder="<image>",
                           attributes={"image_token": "<image>", "image_boundary_token": "<fake_token_around_image>"},
                           image_processor=_idefics2_image, processor=_idefics2_processor, default_size=image_side,
                           pil=True, known_pixels=True),
        "granite_docling": Family(tokens={"<image>": _IMAGE_IDS, "<fake_token_around_image>": (), "<global-img>": ()},
                                  placeholder="<image>", attributes={"image_token": "<image>"},
                                  image_processor=square, processor=_docling_processor, default_size=image_side),
        # one image per prompt (its processor pairs each prompt with one image); the prompt is "<image rows><s> text\x04"
        "fuyu": Family(tokens={"|SPEAKER|": _IMAGE_IDS, "|NEWLINE|": (), "<s>": ("bos_token_id",), "<0x04>": ()},
                       placeholder="", attributes={"bos_token": "<s>"}, image_processor=_fuyu_image,
                       default_size=image_side, pieces=("|SPEAKER|", "|NEWLINE|"), flat_single=True),
        "hyperclovax_vision_v2": Family(
            tokens={"<|image_pad|>": _IMAGE_IDS, "<|video_pad|>": _VIDEO_IDS, "<|vision_start|>": ("vision_start_token_id",),
                    "<|vision_end|>": ("vision_end_token_id",)},
            placeholder="<|vision_start|><|image_pad|><|vision_end|>",
            attributes={"image_token": "<|image_pad|>", "video_token": "<|video_pad|>"},
            image_processor=qwen_image_settings, default_size=lambda config: 448),
        "ovis2": Family(tokens={"<IMG_ATOM>": _IMAGE_IDS, **_OVIS_INDICATORS},
                        placeholder="<image>", attributes={"image_token": "<IMG_ATOM>"}, processor=_ovis2_processor,
                        image_processor=square, default_size=image_side),
    }
