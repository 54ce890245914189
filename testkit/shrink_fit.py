"""Relations between sizes that the coverage bench's shrinking rule (:func:`testkit.coverage.shrink`)
must keep, so that the small config's real forward runs (each found by building the small model and
running it by hand; the config's own validator states none of them).

:func:`fit` runs after the level-1 shrink on the whole (old, new) config pair:

- **A width that equals a width follows it.** An integer ``*_hidden_size``, ``*_hidden_dim``,
  ``*_in_dim``, ``*_out_dim`` or ``*_output_size`` whose default equals the default of a hidden width anywhere in the
  config (:data:`testkit.shrink_rule.WIDTH_KEYS`) becomes the new width (Vision-Text-Dual-Encoder's
  ``pooler_output_size``, X-CLIP's ``mit_hidden_size``, OmDet-Turbo's ``text_projection_in_dim``,
  SAM3's ``fpn_hidden_size``); its ``*_intermediate_size`` becomes the feed-forward size.
- **Key/value heads per layer** (``*key_value_heads*`` lists, ``num_key_value_attention_heads``) as the
  key/value heads: as many as the heads where they were, else 2 (Sapiens2).
- **A list of channels all equal to the hidden size follows it** (``*_channels``: OmDet-Turbo's
  ``vision_features_channels``).
- **A size that equals the head size follows it** (``*projection*`` keys): BROS's ``dim_bbox_projection``
  (hidden / heads).
- **Layer indices stay below the new depth**: ``vision_feature_layer`` lists into ``[-(n+1), n]`` (VipLlava),
  ``intermediate_layers_indices`` and a SAM ViT's ``global_attn_indexes`` below ``n`` (Mllama, DeepSeek-VL-Hybrid's
  SAM encoder), duplicates dropped; Mllama's ``vision_output_dim`` is ``hidden * (len(indices) + 1)``.
- **Image grids scale with the image**: ``image_grid_pinpoints`` ``round(v / old) * new`` (LLaVA-NeXT).
- **Stage widths end at the hidden size**: CLAP's ``patch_embeds_hidden_size`` doubles per stage,
  ``hidden / 2**(stages - 1)``; ALIGN's vision tower ends at ``round_filters(out_channels[-1])`` which
  must equal ``projection_dim`` (``width_coefficient = projection_dim / out_channels[-1]``).
- **Layout embeddings fill the hidden size**: LayoutLMv3's ``4 * coordinate_size + 2 * shape_size = hidden``;
  LiLT's six box embeddings of ``hidden // 6``: hidden 48.
- **Llama 4's vision adapter**: ``intermediate_size = hidden / pixel_shuffle_ratio**2`` (the shuffled
  channels its MLP reads), ``projector_input_dim = projector_output_dim = vision_output_dim``.
- **OmDet-Turbo**: text width = ``class_embed_dim`` = twice the decoder's width (see :func:`_omdet`).
- **The SAM family** (image embedding, prompt encoder, Hiera stages, feature sizes, memory widths): see
  :mod:`testkit.shrink_sam`.
- **EnCodec's ``codebook_dim``** follows its hidden size where the default has them equal (Bark's codec
  sub-config states it; the quantizer's output is the decoder's input).
- **X-Codec 2 / NeuCodec**: ``quantization_dim = hidden_size + semantic_model_config.hidden_size``: the
  quantizer reads the fused acoustic and semantic states (``fc_encoder``'s output).
- **VQ codes below the special ids** (GLM-Image): a codebook whose codes are written into ``input_ids`` keeps its
  codes below the special ids that were above them before the vocabulary shrink (:func:`_vq_codes`).
- **CLVP**: the speech encoder reads the decoder's tokens (its vocabulary is the decoder's); its rotary
  embedding has at least 32 dims, so heads are ``hidden // 32``.
"""

from __future__ import annotations

import re
from typing import Any

from testkit.shrink_sam import fit_sam
from testkit.shrink_vision import fit_vision

__all__ = ["fit"]

_FOLLOWS_WIDTH = re.compile(r"_(hidden_size|hidden_dim|in_dim|out_dim|output_size)$")
# named like widths, but not one: MobileBERT's bottleneck width (its own rule, ``intra_bottleneck_size``),
# Pix2Struct's flattened patch (patch height * width * channels, what its processor makes)
_NOT_WIDTHS = {"true_hidden_size", "patch_embed_hidden_size"}


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _widths(d: dict[str, Any], keys: set[str], found: set[int]) -> set[int]:
    for key, value in d.items():
        if isinstance(value, dict) and key not in ("id2label", "label2id"):
            _widths(value, keys, found)
        elif key in keys and _is_int(value):
            found.add(value)
    return found


def _depth(d: dict[str, Any]) -> int | None:
    return next((d[k] for k in ("num_hidden_layers", "depth", "num_layers") if _is_int(d.get(k))), None)


def fit(old: dict[str, Any], new: dict[str, Any], *, width_keys: set[str], width: int, ffn: int) -> dict[str, Any]:
    """``new`` (the level-1 shrink of ``old``) with the relations of the module docstring restored, in place."""
    _fit(old, new, _widths(old, width_keys, set()), width_keys, width, ffn)
    _media_widths(old, new)
    _vq_codes(old, new)
    return new


def _sub(d: dict[str, Any], key: str) -> dict[str, Any]:
    value = d.get(key)
    return value if isinstance(value, dict) else {}


def _media_widths(old: dict[str, Any], new: dict[str, Any]) -> None:
    """Widths between a multimodal model's sub-configs, in place: Muse-Glimmer's ``out_hidden_size`` is the vision
    width times ``merge_size``² (its merged patches, 1536 * 2² = 6144 by default); GLM-Image's VQ ``latent_channels``
    is the vision width (1536 both by default); Qwen3-ASR's audio ``output_dim`` is the text width, which its audio
    embeddings replace (the default's 3584 is not its 2048-wide text model's; its checkpoints state the text width)."""
    vision, old_vision = _sub(new, "vision_config"), _sub(old, "vision_config")
    width: Any = vision.get("hidden_size")
    merge: Any = vision.get("merge_size")
    if _is_int(new.get("out_hidden_size")) and _is_int(width) and _is_int(merge) \
            and old.get("out_hidden_size") == (old_vision.get("hidden_size") or 0) * (old_vision.get("merge_size") or 0) ** 2:
        new["out_hidden_size"] = width * merge**2
    vq = _sub(new, "vq_config")
    if _is_int(vq.get("latent_channels")) and _is_int(width) and _sub(old, "vq_config").get("latent_channels") == old_vision.get("hidden_size"):
        vq["latent_channels"] = width
    audio, text = _sub(new, "audio_config"), _sub(new, "text_config")
    if new.get("model_type") == "qwen3_asr" and _is_int(audio.get("output_dim")) and _is_int(text.get("hidden_size")):
        audio["output_dim"] = text["hidden_size"]


def _token_ids(d: dict[str, Any], text: bool = True) -> dict[str, int]:
    """The token ids of a config and of its ``text_config`` (``text_config.pad_token_id``...)."""
    ids = {k: v for k, v in d.items() if _is_int(v) and (k.endswith(("_token_id", "_token_index")) or k in ("pad_token_id",))}
    if text:
        ids.update({f"text_config.{k}": v for k, v in _token_ids(_sub(d, "text_config"), text=False).items()})
    return ids


def _vq_codes(old: dict[str, Any], new: dict[str, Any]) -> None:
    """A VQ codebook whose codes share ``input_ids`` with special ids above them stays below them, in place.
    GLM-Image writes its VQ codes (``vq_config.num_embeddings``: 0..16383) into ``input_ids`` and then searches
    them for ``image_start_token_id`` / ``image_end_token_id`` (16384, 16385: its checkpoints put every special id
    above the codes, so no code is ever found). The vocabulary shrink moves those ids to the top of the new
    vocabulary (1020..1023) while the codebook keeps its size: ``num_embeddings`` becomes the least new id of the
    special ids that were at or above it, and the codes fit the text embedding again."""
    vq, old_vq = _sub(new, "vq_config"), _sub(old, "vq_config")
    codes: Any = old_vq.get("num_embeddings")
    if not (_is_int(codes) and _is_int(vq.get("num_embeddings"))):
        return
    if not any(_is_int(old.get(k)) and old[k] >= codes for k in ("image_start_token_id", "image_end_token_id")):
        return
    old_ids, new_ids = _token_ids(old), _token_ids(new)
    above = [new_ids[k] for k, v in old_ids.items() if v >= codes and k in new_ids]
    if above and min(above) < vq["num_embeddings"]:
        vq["num_embeddings"] = min(above)


def _fit(d: dict[str, Any], out: dict[str, Any], old_widths: set[int], width_keys: set[str], width: int, ffn: int) -> None:
    for key, value in list(out.items()):
        if isinstance(value, dict) and isinstance(d.get(key), dict) and key not in ("id2label", "label2id"):
            _fit(d[key], value, old_widths, width_keys, width, ffn)
    hidden: Any = next((out[k] for k in ("hidden_size", "d_model") if _is_int(out.get(k))), None)
    old_hidden: Any = next((d[k] for k in ("hidden_size", "d_model") if _is_int(d.get(k))), None)
    heads: Any = out.get("num_attention_heads")
    old_heads: Any = d.get("num_attention_heads")
    for key, value in list(out.items()):
        if not isinstance(key, str) or key in width_keys or not _is_int(value) or value != d.get(key):
            continue
        if _FOLLOWS_WIDTH.search(key) and key not in _NOT_WIDTHS and value in old_widths and value > width:
            out[key] = width
            companion = _FOLLOWS_WIDTH.sub("_intermediate_size", key)
            if _is_int(out.get(companion)) and out[companion] > ffn:
                out[companion] = ffn
        elif "projection" in key and _is_int(hidden) and _is_int(heads) and _is_int(old_hidden) and _is_int(old_heads) \
                and value == old_hidden // old_heads and value != hidden // heads:
            out[key] = hidden // heads
        elif key in ("num_key_value_attention_heads",) and _is_int(heads) and _is_int(old_heads):
            out[key] = _kv(value, heads, old_heads)
    for key, value in list(out.items()):
        if not (isinstance(key, str) and isinstance(value, list) and value and all(_is_int(v) for v in value)):
            continue
        if key.endswith("_channels") and _is_int(old_hidden) and all(v == old_hidden for v in value) and hidden != old_hidden:
            out[key] = [hidden] * len(value)  # OmDet-Turbo's vision_features_channels: the encoder's width
        elif "key_value_heads" in key and _is_int(heads) and _is_int(old_heads):
            out[key] = [_kv(v, heads, old_heads) for v in value]  # Sapiens2's per-layer key/value heads
    _layer_indices(out)
    _image_grid(d, out)
    _stages(d, out, hidden)
    _layout(out, hidden)
    _llama4_vision(out, hidden)
    _clvp(out)
    _omdet(out)
    _codec_quantizer(out)
    if _is_int(out.get("codebook_dim")) and _is_int(hidden) and d.get("codebook_dim") == old_hidden:
        out["codebook_dim"] = hidden  # EnCodec's codebooks are as wide as its latents (Bark's codec)
    fit_vision(d, out)  # EfficientNet, DepthPro, LW-/RF-DETR, per-stage block lists: testkit/shrink_vision.py
    fit_sam(d, out, ffn=ffn)  # the SAM family (testkit/shrink_sam.py)


def _kv(value: int, heads: int, old_heads: int) -> int:
    """Key/value heads as :func:`testkit.coverage.shrink` sets them: as many as the heads where they were, else 2 (1 where 2 does not divide)."""
    kv = heads if value == old_heads else min(value, 2)
    return kv if heads % kv == 0 else 1


def _layer_indices(out: dict[str, Any]) -> None:
    vision = out.get("vision_config")
    n = _depth(vision) if isinstance(vision, dict) else None
    layers = out.get("vision_feature_layer")
    if n is not None and isinstance(layers, list) and all(_is_int(v) for v in layers):
        out["vision_feature_layer"] = [max(-(n + 1), min(v, n)) for v in layers]
    n = _depth(out)
    # global attention layers: only in SAM's ViT (which has a neck, ``output_channels``); SAM3's ViTDet
    # backbone builds its rotary tables per window, a global layer at 64 px does not fit them
    for key in ("intermediate_layers_indices", "global_attn_indexes"):
        value = out.get(key)
        if key == "global_attn_indexes" and "output_channels" not in out:
            continue
        if n is not None and isinstance(value, list) and value and all(_is_int(v) for v in value) and max(value) >= n:
            out[key] = list(dict.fromkeys(min(v, n - 1) for v in value))
    indices = out.get("intermediate_layers_indices")
    if isinstance(indices, list) and _is_int(out.get("vision_output_dim")) and _is_int(out.get("hidden_size")):
        out["vision_output_dim"] = out["hidden_size"] * (len(indices) + 1)  # Mllama: the last state and each chosen one


def _image_grid(d: dict[str, Any], out: dict[str, Any]) -> None:
    pins, vision, old_vision = out.get("image_grid_pinpoints"), out.get("vision_config"), d.get("vision_config")
    if not (isinstance(pins, list) and isinstance(vision, dict) and isinstance(old_vision, dict)):
        return
    size, old = vision.get("image_size"), old_vision.get("image_size")
    if _is_int(size) and _is_int(old) and size != old:
        out["image_grid_pinpoints"] = [[max(1, round(v / old)) * size for v in pin] for pin in pins]


def _stages(d: dict[str, Any], out: dict[str, Any], hidden: Any) -> None:
    depths = out.get("depths")
    if _is_int(out.get("patch_embeds_hidden_size")) and isinstance(depths, list) and _is_int(hidden):
        out["patch_embeds_hidden_size"] = max(1, hidden // 2 ** (len(depths) - 1))  # CLAP's Swin doubles per stage
    vision, projection = out.get("vision_config"), out.get("projection_dim")
    if isinstance(vision, dict) and _is_int(projection) and isinstance(vision.get("width_coefficient"), (int, float)):
        channels = vision.get("out_channels")
        if isinstance(channels, list) and channels and _is_int(channels[-1]):
            vision["width_coefficient"] = projection / channels[-1]  # ALIGN: image embeds are the tower's last channels


def _layout(out: dict[str, Any], hidden: Any) -> None:
    if not _is_int(hidden):
        return
    if _is_int(out.get("coordinate_size")) and _is_int(out.get("shape_size")) and 4 * out["coordinate_size"] + 2 * out["shape_size"] != hidden:
        coordinate = hidden // 6
        out["coordinate_size"], out["shape_size"] = coordinate, (hidden - 4 * coordinate) // 2
    if _is_int(out.get("channel_shrink_ratio")) and "max_2d_position_embeddings" in out and hidden % 6:
        out["hidden_size"] = 48  # LiLT: six box embeddings of hidden // 6 make the layout stream


def _llama4_vision(out: dict[str, Any], hidden: Any) -> None:
    ratio = out.get("pixel_shuffle_ratio")
    if not (isinstance(ratio, float) and ratio > 0 and _is_int(hidden) and _is_int(out.get("vision_output_dim"))
            and "projector_input_dim" in out):
        return
    out["intermediate_size"] = int(hidden / ratio**2)
    out["projector_input_dim"] = out["projector_output_dim"] = out["vision_output_dim"]


def _clvp(out: dict[str, Any]) -> None:
    speech, decoder = out.get("speech_config"), out.get("decoder_config")
    if isinstance(speech, dict) and isinstance(decoder, dict) and _is_int(decoder.get("vocab_size")):
        speech["vocab_size"] = decoder["vocab_size"]
    for key in ("text_config", "speech_config"):
        sub = out.get(key)
        if isinstance(sub, dict) and sub.get("use_rotary_embedding") and _is_int(sub.get("hidden_size")) \
                and _is_int(sub.get("num_attention_heads")) and sub["hidden_size"] // sub["num_attention_heads"] < 32:
            sub["num_attention_heads"] = max(1, sub["hidden_size"] // 32)


def _omdet(out: dict[str, Any]) -> None:
    """OmDet-Turbo: the text width is ``class_embed_dim`` (its task encoder reads the text states), and
    transformers builds ``task_project`` only where ``class_embed_dim`` differs from the decoder's width
    (its checkpoints: 512 against 256), so the text side gets twice the width."""
    text = out.get("text_config")
    if not (isinstance(text, dict) and _is_int(out.get("class_embed_dim")) and _is_int(out.get("decoder_hidden_dim"))
            and _is_int(text.get("hidden_size")) and "text_projection_in_dim" in out):
        return
    wide = 2 * out["decoder_hidden_dim"]
    text["hidden_size"] = out["text_projection_in_dim"] = out["text_projection_out_dim"] = out["class_embed_dim"] = wide


def _codec_quantizer(out: dict[str, Any]) -> None:
    """X-Codec 2 / NeuCodec: the quantizer's width is the fused acoustic and semantic width."""
    semantic = out.get("semantic_model_config")
    if _is_int(out.get("quantization_dim")) and _is_int(out.get("hidden_size")) and isinstance(semantic, dict) \
            and _is_int(semantic.get("hidden_size")):
        out["quantization_dim"] = out["hidden_size"] + semantic["hidden_size"]
