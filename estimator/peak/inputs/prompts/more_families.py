"""More vision-language processor families (see :class:`estimator.peak.inputs.prompts.processors.Family`): the model types
whose prompts are built by their processor with a recipe of their own, kept apart from the LLaVA/Qwen/Idefics
families of :mod:`estimator.peak.inputs.prompts.processors`.

- **Grid models** (here: GLM-4V/4.6V/OCR/GA, GLM-Image, PaddleOCR-VL, VideoLLaMA3, Qwen2.5-Omni's thinker,
  Cosmos3-Omni, EXAONE 4.5, Muse-Glimmer, Kimi-K2.5, Qwen4-Exp): the image processor cuts the image into
  patches (``patch_size``), groups them ``merge_size`` by ``merge_size`` (and ``temporal_patch_size`` frames),
  and the processor writes one image token per merged patch between the family's start and end tokens.
- **The others** (:mod:`estimator.peak.inputs.prompts.captioners`): fixed counts of image tokens (BLIP-2, InstructBLIP,
  Kosmos-2(.5), Florence-2, Idefics, Step3p7, Phi-4-multimodal, PP-Chart2Table, ModernVBERT/UltraVBERT),
  images beside the text (BLIP, GIT, TIPS v2) and encoder-decoder captioners (Pix2Struct, PP-FormulaNet,
  UDOP, vision-encoder-decoder: the image to the encoder, the text to the decoder).

Each family is built from the model config alone (the repo's ``preprocessor_config.json`` replaces the image
processor settings where it exists); the token ids are the config's own.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any

from estimator.peak.inputs.prompts.captioners import captioner_families
from estimator.peak.inputs.prompts.family import Family
from estimator.peak.inputs.prompts.minicpm_family import minicpm_families

if TYPE_CHECKING:
    from estimator.peak.inputs.prompts.family import Family

__all__ = ["more_families"]


def _vision(config: Any) -> Any:
    return getattr(config, "vision_config", None)


def _merge(vision: Any) -> int:
    """The side of the square of patches merged into one image token."""
    kernel = getattr(vision, "merge_kernel_size", None)
    if kernel:
        return int(kernel[0])
    return int(getattr(vision, "spatial_merge_size", None) or getattr(vision, "merge_size", None) or 2)


def _grid_image(config: Any) -> dict[str, Any]:
    """A grid image processor's patching from the vision config."""
    vision = _vision(config)
    settings: dict[str, Any] = {"patch_size": int(vision.patch_size), "merge_size": _merge(vision)}
    temporal = getattr(vision, "temporal_patch_size", None)
    if temporal:
        settings["temporal_patch_size"] = int(temporal)
    return settings


def _grid(image: str, start: str = "", end: str = "", *, image_ids: tuple[str, ...] = ("image_token_id", "image_token_index"),
          start_ids: tuple[str, ...] = (), end_ids: tuple[str, ...] = (), video: str = "", video_ids: tuple[str, ...] = (),
          extra: tuple[str, ...] = (), classes: dict[str, str] | None = None, size: int = 448) -> Family:
    """A grid family: ``start`` + ``image`` + ``end`` in the prompt for one image, the processor expanding ``image``."""

    tokens: dict[str, tuple[str, ...]] = {image: image_ids}
    if start:
        tokens[start] = start_ids
    if end:
        tokens[end] = end_ids
    attributes = {"image_token": image}
    if video:
        tokens[video] = video_ids or ("video_token_id", "video_token_index")
        attributes["video_token"] = video
    for token in extra:
        tokens.setdefault(token, ())
    return Family(tokens=tokens, placeholder=f"{start}{image}{end}", attributes=attributes, image_processor=_grid_image,
                  default_size=lambda config: size, classes=dict(classes or {}))


def _glm(**classes: str) -> Family:
    return _grid("<|image|>", "<|begin_of_image|>", "<|end_of_image|>", start_ids=("image_start_token_id",),
                 end_ids=("image_end_token_id",), video="<|video|>",
                 extra=("<|begin_of_video|>", "<|end_of_video|>"), classes=classes)


_QWEN_VL = {"<|vision_start|>": ("vision_start_token_id",), "<|vision_end|>": ("vision_end_token_id",)}


def _qwen(**classes: str) -> Family:
    return _grid("<|image_pad|>", "<|vision_start|>", "<|vision_end|>", start_ids=_QWEN_VL["<|vision_start|>"],
                 end_ids=_QWEN_VL["<|vision_end|>"], video="<|video_pad|>", classes=classes)


def _omni() -> Family:
    from dataclasses import replace

    family = _grid("<|IMAGE|>", "<|vision_bos|>", "<|vision_eos|>", video="<|VIDEO|>",
                   extra=("<|AUDIO|>", "<|audio_bos|>", "<|audio_eos|>"), classes={"processor": "Qwen2_5OmniProcessor", "image_processor": "Qwen2VLImageProcessor"})
    attributes = {**family.attributes, "audio_token": "<|AUDIO|>", "vision_bos_token": "<|vision_bos|>",
                  "vision_eos_token": "<|vision_eos|>", "audio_bos_token": "<|audio_bos|>", "audio_eos_token": "<|audio_eos|>"}
    tokens = {**family.tokens, "<|AUDIO|>": ("audio_token_index", "audio_token_id"),
              "<|audio_bos|>": ("audio_start_token_id",), "<|audio_eos|>": ("audio_end_token_id",)}
    return replace(family, tokens=tokens, attributes=attributes, processor=_omni_parts,
                   classes={**family.classes, "video_processor": "Qwen2VLVideoProcessor"})


def _omni_parts(config: Any) -> dict[str, Any]:
    """Qwen2.5-Omni's processor also holds the audio encoder's feature extractor (Whisper's, mel bins from the config)."""
    from transformers import WhisperFeatureExtractor

    audio = getattr(config, "audio_config", None)
    return {"feature_extractor": WhisperFeatureExtractor(feature_size=int(getattr(audio, "num_mel_bins", 128)))}


def _qwen3_omni() -> Family:
    """Qwen3-Omni's thinker: Qwen3OmniMoeProcessor reads the same tokenizer attributes as Qwen2.5-Omni's, its
    tokenizer naming them ``<|image_pad|>``, ``<|vision_start|>``, ``<|audio_pad|>``, ``<|audio_start|>`` and so on."""
    from dataclasses import replace

    family = _grid("<|image_pad|>", "<|vision_start|>", "<|vision_end|>", start_ids=("vision_start_token_id",),
                   video="<|video_pad|>", extra=("<|audio_pad|>", "<|audio_start|>", "<|audio_end|>"),
                   classes={"processor": "Qwen3OmniMoeProcessor", "image_processor": "Qwen2VLImageProcessor",
                            "video_processor": "Qwen2VLVideoProcessor"})
    attributes = {**family.attributes, "audio_token": "<|audio_pad|>", "vision_bos_token": "<|vision_start|>",
                  "vision_eos_token": "<|vision_end|>", "audio_bos_token": "<|audio_start|>", "audio_eos_token": "<|audio_end|>"}
    tokens = {**family.tokens, "<|audio_pad|>": ("audio_token_index", "audio_token_id"),
              "<|audio_start|>": ("audio_start_token_id",), "<|audio_end|>": ("audio_end_token_id",)}
    return replace(family, tokens=tokens, attributes=attributes, processor=_omni_parts)


def _glm_image() -> Family:
    """GLM-Image's image-to-image prompt: the source image's grid tokens, then the target grid the model will
    generate (``<sop>h w<eop>``, the processor's default target size)."""
    from dataclasses import replace

    family = _grid("<|image|>", "<|begin_of_image|>", "<|end_of_image|>", start_ids=("image_start_token_id",),
                   end_ids=("image_end_token_id",), extra=("<sop>", "<eop>", "<|dit_token_16384|>"))
    return replace(family, attributes={**family.attributes, "grid_bos_token": "<sop>", "grid_eos_token": "<eop>",
                                       "bos_token": "<|dit_token_16384|>"},
                   image_processor=lambda config: {**_grid_image(config), "temporal_patch_size": 1})  # a still image


def _gemma4(unified: bool = False) -> Family:
    """Gemma 4: ``<|image|>`` in the prompt, which the processor expands to ``<|image>`` + one soft token per pooled
    patch group (the image resized within ``max_soft_tokens`` groups of ``pooling_kernel_size``² patches) + ``<image|>``.
    Its processor also holds the audio feature extractor (the class transformers maps the type to, its defaults)."""

    def image(config: Any) -> dict[str, Any]:
        vision = _vision(config)
        return {"patch_size": int(vision.patch_size), "pooling_kernel_size": int(vision.pooling_kernel_size)}

    def parts(config: Any) -> dict[str, Any]:
        import transformers

        name = "Gemma4UnifiedAudioFeatureExtractor" if unified else "Gemma4AudioFeatureExtractor"
        return {"feature_extractor": getattr(transformers, name)()}

    tokens = {"<|image|>": ("image_token_id",), "<|image>": ("boi_token_id",), "<image|>": ("eoi_token_id",),
              "<|video|>": ("video_token_id",), "<|audio|>": ("audio_token_id",), "<|audio>": ("boa_token_id",),
              "<audio|>": ("eoa_token_index", "eoa_token_id")}
    attributes = {"image_token": "<|image|>", "boi_token": "<|image>", "eoi_token": "<image|>", "audio_token": "<|audio|>",
                  "boa_token": "<|audio>", "eoa_token": "<audio|>"}
    return Family(tokens=tokens, placeholder="<|image|>", attributes=attributes, image_processor=image, processor=parts)


def _hunyuan_vl() -> Family:
    """HunYuan-VL's tokenizer names its image token and the two wrappers, which its processor reads."""
    from dataclasses import replace

    family = _grid("<image>", "<im_start>", "<im_end>")
    return replace(family, attributes={**family.attributes, "image_start_token": "<im_start>", "image_end_token": "<im_end>"})


def _lfm2_vl() -> Family:
    """LFM2-VL: ``<image>`` in the prompt, which the processor expands to ``<|image_start|>``, the tiles' rows and columns
    (``<|img_row_R_col_C|>`` + the tile's image tokens), ``<|img_thumbnail|>`` + the thumbnail's and ``<|image_end|>``;
    the image processor's patching (``encoder_patch_size``, ``downsample_factor``) from the model config."""

    def image(config: Any) -> dict[str, Any]:
        return {"encoder_patch_size": int(_vision(config).patch_size), "downsample_factor": int(config.downsample_factor)}

    tiles = [f"<|img_row_{r}_col_{c}|>" for r in range(1, 11) for c in range(1, 11)]
    tokens: dict[str, tuple[str, ...]] = {"<image>": ("image_token_id",), "<|image_start|>": (), "<|image_end|>": (),
                                          "<|img_thumbnail|>": ()}
    return Family(tokens=tokens, placeholder="<image>", image_processor=image, extra_tokens=lambda: tiles,
                  attributes={"image_token": "<image>", "image_start_token": "<|image_start|>",
                              "image_end_token": "<|image_end|>", "image_thumbnail_token": "<|img_thumbnail|>"},
                  default_size=lambda config: 512)


def _nemotron_omni() -> Family:
    """Nemotron-3-Nano-Omni: ``<image>`` in the prompt, which its processor expands to ``<img>`` + one ``<image>`` per
    pixel-shuffled group of patches + ``</img>`` (the image resized within ``min_num_patches``..``max_num_patches``
    patches); the image processor's ``patch_size`` and ``downsample_ratio`` from the model config; its processor also
    holds the Parakeet feature extractor (its defaults; these image prompts send no audio)."""

    def image(config: Any) -> dict[str, Any]:
        return {"patch_size": int(_vision(config).patch_size), "downsample_ratio": float(config.downsample_ratio)}

    def parts(config: Any) -> dict[str, Any]:
        return {"feature_extractor": _extractor("ParakeetFeatureExtractor"),
                "video_temporal_patch_dim": int(config.video_temporal_patch_size)}

    tokens: dict[str, tuple[str, ...]] = {"<image>": ("image_token_id",), "<img>": (), "</img>": (), "<video>": ("video_token_id",),
                                          "<so_embedding>": ("audio_token_id",), "<so_start>": (), "<so_end>": ()}
    return Family(tokens=tokens, placeholder="<image>", image_processor=image, processor=parts,
                  attributes={"image_token": "<image>", "image_start_token": "<img>", "image_end_token": "</img>",
                              "video_token": "<video>", "audio_token": "<so_embedding>"})


def _unlimited_ocr() -> Family:
    """Unlimited-OCR: ``<image>`` in the prompt, which its processor expands to the global view's queries (a row of
    ``size / patch_size / 4`` per row plus a newline, and a view separator); the global view at the SAM tower's
    ``image_size`` (1024 both in the checkpoints), the processor's ``patch_size`` the SAM's and its
    ``downsample_ratio`` the SAM's two stride-2 convolutions (4). An image larger than ``tile_size`` (640) is also cut
    into local tiles (``pixel_values_local``), their queries before the global view's; the forward reads their counts
    and grids as the Python lists the processor returns (``num_local_patches``, ``patches_grid``: passed as they are,
    :attr:`~estimator.peak.inputs.prompts.family.MediaInputs.plain`)."""

    def image(config: Any) -> dict[str, Any]:
        side = int(_vision(config).sam_config.image_size)
        return {"size": {"height": side, "width": side}}

    def processor(config: Any) -> dict[str, Any]:
        sam = _vision(config).sam_config
        return {"patch_size": int(sam.patch_size), "downsample_ratio": 2 ** len(sam.downsample_channels)}

    return Family(tokens={"<image>": ("image_token_id",)}, placeholder="<image>", attributes={"image_token": "<image>"},
                  image_processor=image, processor=processor)


def _extractor(name: str) -> Any:
    """A processor's audio feature extractor at its defaults (the image prompts here send no audio)."""
    import transformers

    return getattr(transformers, name)()


@cache
def _table() -> dict[str, Family]:
    from dataclasses import replace

    return {
        "gemma4": _gemma4(),
        "gemma4_unified": _gemma4(unified=True),
        # Diffusion Gemma maps to Gemma4Processor; EmbeddingGemma 2's processor writes the same Gemma 4 tokens
        "diffusion_gemma": _gemma4(),
        "embedding_gemma2": _gemma4(),
        "glm4v": _glm(),
        "lfm2_vl": _lfm2_vl(),
        "lfm3_vl": _qwen(),  # Lfm3VlProcessor: Qwen-VL's <|vision_start|><|image_pad|><|vision_end|> grid, Qwen2VLImageProcessor
        "nemotron_h_omni": _nemotron_omni(),
        "unlimited_ocr": _unlimited_ocr(),
        "glm4v_moe": _glm(),  # GLM-4.5V: Glm4vProcessor, GLM-4V's image and video processors
        "glm5_next": _glm(),  # GLM-5-Next: Glm5NextProcessor, GLM-4V's tokens (<|begin_of_image|><|image|><|end_of_image|>)
        "glm_image": _glm_image(),
        "glm46v": _glm(),
        "minimax_m3_vl": _grid("]<]image[>[", "]<]start of image[>[", "]<]end of image[>[", video="]<]video[>["),
        "glm_ocr": _glm(processor="Glm46VProcessor", image_processor="Glm46VImageProcessor", video_processor="Glm46VVideoProcessor"),
        "glmga": _glm(processor="Glm46VProcessor", video_processor="Glm46VVideoProcessor"),
        "paddleocr_vl": _grid("<|IMAGE_PLACEHOLDER|>", "<|IMAGE_START|>", "<|IMAGE_END|>"),
        "video_llama_3": _grid("<|image_pad|>", video="<|video_pad|>"),
        "qwen2_5_omni_thinker": _omni(),
        "qwen3_omni_moe_thinker": _qwen3_omni(),
        "cosmos3_omni": _qwen(processor="Qwen3VLProcessor", video_processor="Qwen3VLVideoProcessor"),
        "qwen4_exp": _qwen(),
        "exaone4_5": _grid("<|image_pad|>", video="<|video_pad|>"),
        # HunYuan-VL: the chat template's <im_start><image><im_end> (the processor checks the wrappers), <image>
        # expanded to a row of merged patches plus one newline token per row, and the two wrappers counted
        "hunyuan_vl": _hunyuan_vl(),
        "muse_glimmer": _grid("<|patch|>", video="<|video|>",
                              extra=("<|image_start|>", "<|image_end|>", "<|vid_frame_separator|>", "<|vid_start|>", "<|vid_end|>")),
        # Muse Spark: Muse Glimmer's image and video tokens (MuseGlimmerImageProcessor), plus its audio ones
        "muse_spark": replace(_grid("<|patch|>", "<|image_start|>", "<|image_end|>", start_ids=("image_start_token_id",),
                                    end_ids=("image_end_token_id",), video="<|video|>",
                                    extra=("<|vid_frame_separator|>", "<|vid_start|>", "<|vid_end|>", "<|audio|>",
                                           "<|soft_audio_start|>", "<|soft_audio_end|>")),
                              processor=lambda config: {"feature_extractor": _extractor("MuseSparkFeatureExtractor")}),
        # dots3.note: Dots3NoteProcessor's <|imgpad|> grid (Qwen2VLImageProcessor), its video and audio pads; its
        # vision tower's Conv2d patch embedding reads rows of one frame (temporal_patch_size 1)
        "dots3_note": replace(_grid("<|imgpad|>", video="<|video_pad|>", extra=("<|audio_comp_pad|>",)),
                              image_processor=lambda config: {**_grid_image(config), "temporal_patch_size": 1},
                              processor=lambda config: {"feature_extractor": _extractor("Dots3NoteFeatureExtractor")}),
        "kimi_k25": _grid("<|media_pad|>", "<|media_begin|>", "<|media_end|>", start_ids=("vision_start_token_id",),
                          end_ids=("vision_end_token_id",), video="<|kimi_k25_video_placeholder|>", extra=("<|media_content|>",)),
    }


def more_families() -> dict[str, Family]:
    """model_type -> its processor family (the grid models here, the others in :mod:`estimator.peak.inputs.prompts.captioners`)."""

    return {**captioner_families(), **_table(), **minicpm_families()}
