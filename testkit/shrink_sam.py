"""The size relations of the SAM family that the coverage bench's shrinking rule must keep (called by
:func:`testkit.shrink_fit.fit` at every level of the config, after the level-1 shrink).

Each was found by building the small model and running its real forward on its processor's inputs
(:mod:`estimator.peak.inputs.vision.sam`); the configs' own validators state none of them.

- **The image embedding is the prompt and mask decoder's width** (SAM, SAM-HQ): the ViT neck's
  ``output_channels`` equals the prompt encoder's ``hidden_size``, and the shared positional embedding's
  ``num_pos_feats`` is half of it (sines and cosines); SAM-HQ's ``vit_dim`` (the ViT's early features
  its mask decoder reads) is the ViT's ``hidden_size``.
- **An image of whole patches** (SAM3's 14 px patches): 64 px -> 56 px; the config's own ``image_size``
  setter derives the feature sizes as ``4 * image // patch`` (18 at 64 px, where the map is 16).
- **The prompt encoder sees the image the vision tower sees**: its ``image_size`` (and ``patch_size``) are
  the vision tower's, ``image_embedding_size`` (SAM) is ``image_size // patch_size``.
- **Hiera's stage widths follow its first** (SAM2, SAM2-video): ``embed_dim_per_stage`` scaled by
  ``hidden_size`` (the patch embedding's width is the first stage's), and the FPN neck's
  ``backbone_channel_list`` is those widths from the last stage to the first.
- **The backbone's feature sizes follow the image embedding grid** (SAM2, SAM3 tracker, EdgeTAM, their
  video models): ``backbone_feature_sizes`` and the memory attention's ``memory_attention_rope_feat_sizes``
  scale with ``image_size // patch_size`` of the prompt encoder (SAM2: 1024 px / 16 = 64 -> 4 at 64 px:
  ``[[256, 256], [128, 128], [64, 64]]`` -> ``[[16, 16], [8, 8], [4, 4]]``).
- **EdgeTAM's timm backbone is RepViT-M1**: transformers' default config spells the key ``archirecture``,
  so the timm wrapper builds its own default (ResNet-50), whose channels and strides do not fit the
  default ``backbone_channel_list`` (``[384, 192, 96, 48]``: RepViT-M1's, as its checkpoints name it);
  the architecture the config names is used.
- **EdgeTAM's perceiver windows keep their size**: ``perceiver_resampler_num_latents_2d`` is one latent per
  window of the feature grid (16 x 16 at 1024 px, 1 at 64 px), ``memory_attention_rope_k_sizes`` its side.
- **A video tracker is wider than its memory** (:func:`_video_width`): 128 where the memory is 64 wide.
- **Memory widths are the model's width** (the video models): ``memory_fuser_embed_dim``,
  ``mask_downsampler_embed_dim`` and ``memory_attention_hidden_size`` that equalled the old hidden size follow
  the new one (their feed-forward sizes -> 128).
- **A SAM stage feeding a CLIP is as wide as the CLIP** (Unlimited-OCR, :func:`_sam_into_clip`): its last
  ``downsample_channels`` map is the CLIP encoder's patch embeddings (1024 both by default), so the
  downsampling widths scale with the CLIP's ``hidden_size`` (``[512, 1024]`` -> ``[32, 64]`` at 64).
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["fit_sam"]


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _side(v: Any) -> int | None:
    if isinstance(v, list) and v and _is_int(v[0]):
        return int(v[0])
    return int(v) if _is_int(v) else None


def fit_sam(d: dict[str, Any], out: dict[str, Any], *, ffn: int) -> None:
    """``out`` (the shrink of ``d``, one level of the config) with the relations of the module docstring restored, in place."""
    _hiera(d, out)
    _neck(out)
    _sam_into_clip(d, out)
    prompt, decoder, vision = out.get("prompt_encoder_config"), out.get("mask_decoder_config"), out.get("vision_config")
    if not (isinstance(prompt, dict) and isinstance(decoder, dict) and isinstance(vision, dict)):
        return
    width: Any = prompt.get("hidden_size")
    if not _is_int(width):
        return
    memory: Any = out.get("memory_encoder_output_channels")
    if _is_int(memory) and width <= memory:
        width = _video_width(d, out, 2 * memory)
    # the image the vision tower sees, and its patch: SAM's ViT holds them; SAM2/SAM3 in their backbone
    backbone: dict[str, Any] = vision["backbone_config"] if isinstance(vision.get("backbone_config"), dict) else {}
    image = _side(vision.get("image_size")) or _side(backbone.get("image_size"))
    patch = _side(vision.get("patch_size")) or _side(backbone.get("patch_size"))
    if "output_channels" in vision:  # SAM / SAM-HQ's ViT
        vision["output_channels"] = width
        if _is_int(vision.get("num_pos_feats")):
            vision["num_pos_feats"] = width // 2
        if _is_int(decoder.get("vit_dim")) and _is_int(vision.get("hidden_size")):
            decoder["vit_dim"] = vision["hidden_size"]
    if image is not None and patch is not None and image % patch:
        # SAM3's ViT (14 px patches): an image of whole patches, as its config's own image_size setter assumes
        # (it derives the feature sizes as 4 * image // patch: 18 at 64 px, where the map is 4 * 4 = 16)
        image = image // patch * patch
        for part in (vision, backbone):
            if _is_int(part.get("image_size")):
                part["image_size"] = image
    if image is not None:
        prompt["image_size"] = image
        if _is_int(out.get("image_size")):
            out["image_size"] = image  # the video models' own copy
    if patch is not None and "output_channels" in vision:
        prompt["patch_size"] = patch
    if _is_int(prompt.get("image_size")) and _is_int(prompt.get("patch_size")):
        grid = prompt["image_size"] // prompt["patch_size"]
        if "image_embedding_size" in prompt:
            prompt["image_embedding_size"] = grid
        old_prompt = d.get("prompt_encoder_config") or {}
        old_grid = old_prompt.get("image_size", 0) // max(1, old_prompt.get("patch_size", 1))
        _feature_sizes(vision, d.get("vision_config") or {}, grid, old_grid)
        if isinstance(out.get("memory_attention_rope_feat_sizes"), list):
            out["memory_attention_rope_feat_sizes"] = [grid, grid]
        latents: Any = d.get("perceiver_resampler_num_latents_2d")
        if _is_int(latents) and old_grid > 0 and isinstance(out.get("memory_attention_rope_k_sizes"), list):
            # EdgeTAM's perceiver: one 2-d latent per window of the feature grid (16 x 16 windows of 4 cells at 1024 px);
            # the windows keep their size, the memory keys are the latents
            per_side = max(1, math.isqrt(latents) * grid // old_grid)
            out["perceiver_resampler_num_latents_2d"] = per_side * per_side
            out["memory_attention_rope_k_sizes"] = [per_side, per_side]
    _memory(d, out, width, ffn)


def _sam_into_clip(d: dict[str, Any], out: dict[str, Any]) -> None:
    sam, clip = out.get("sam_config"), out.get("encoder_config")
    old_sam, old_clip = d.get("sam_config") or {}, d.get("encoder_config") or {}
    if not (isinstance(sam, dict) and isinstance(clip, dict) and isinstance(sam.get("downsample_channels"), list)):
        return
    channels, width, old_width = sam["downsample_channels"], clip.get("hidden_size"), old_clip.get("hidden_size")
    old_channels = old_sam.get("downsample_channels")
    if _is_int(width) and _is_int(old_width) and isinstance(old_channels, (list, tuple)) and old_channels \
            and old_channels[-1] == old_width and channels[-1] != width:
        sam["downsample_channels"] = [max(1, v * width // old_width) for v in old_channels]


def _hiera(d: dict[str, Any], out: dict[str, Any]) -> None:
    dims, hidden, old_hidden = out.get("embed_dim_per_stage"), out.get("hidden_size"), d.get("hidden_size")
    if isinstance(dims, list) and _is_int(hidden) and _is_int(old_hidden) and dims and dims[0] == old_hidden and hidden != old_hidden:
        out["embed_dim_per_stage"] = [v * hidden // old_hidden for v in dims]


def _neck(out: dict[str, Any]) -> None:
    backbone = out.get("backbone_config")
    if not (isinstance(backbone, dict) and isinstance(out.get("backbone_channel_list"), list)):
        return
    if isinstance(backbone.get("embed_dim_per_stage"), list):
        out["backbone_channel_list"] = list(reversed(backbone["embed_dim_per_stage"]))
    if backbone.get("model_type") == "timm_wrapper" and isinstance(backbone.get("archirecture"), str):
        backbone["architecture"] = backbone["archirecture"]  # EdgeTAM: the misspelled default key names RepViT-M1


def _feature_sizes(vision: dict[str, Any], old_vision: dict[str, Any], grid: int, old_grid: int) -> None:
    sizes, old = vision.get("backbone_feature_sizes"), old_vision.get("backbone_feature_sizes")
    if not (isinstance(sizes, list) and isinstance(old, list) and old_grid > 0 and grid != old_grid):
        return
    vision["backbone_feature_sizes"] = [[max(1, v * grid // old_grid) for v in pair] for pair in old]


def _memory(d: dict[str, Any], out: dict[str, Any], width: int, ffn: int) -> None:
    """The video models' memory widths (see the module docstring)."""
    old_width = (d.get("prompt_encoder_config") or {}).get("hidden_size")
    for key in ("memory_fuser_embed_dim", "mask_downsampler_embed_dim", "memory_attention_hidden_size"):
        if _is_int(out.get(key)) and out[key] == old_width:
            out[key] = width
    for key in ("memory_fuser_intermediate_dim", "memory_attention_feed_forward_hidden_size", "memory_attention_mlp_hidden_size"):
        if _is_int(out.get(key)) and out[key] > ffn:
            out[key] = ffn


def _video_width(d: dict[str, Any], out: dict[str, Any], width: int) -> int:
    """A video tracker's width above its memory's: every size that equalled the old width (the prompt
    encoder's and mask decoder's hidden size, the FPN's, the memory attention's, fuser's and downsampler's)
    becomes ``width``. The memory attention reads 64-channel memories (``kv_in_dim=64`` in the modeling
    code, ``memory_encoder_output_channels``) and splits each object pointer into ``hidden / 64`` tokens;
    at ``hidden == 64`` transformers' unsplit path leaves the pointers 4-d and the memory concatenation fails."""
    old_width = (d.get("prompt_encoder_config") or {}).get("hidden_size")
    for part, old in ((out, d), *((out[k], d.get(k) or {}) for k in ("prompt_encoder_config", "mask_decoder_config", "vision_config")
                                  if isinstance(out.get(k), dict))):
        for key, value in list(part.items()):
            if _is_int(value) and key != "memory_encoder_output_channels" and old.get(key) == old_width and _is_int(old_width):
                part[key] = width
    return width

