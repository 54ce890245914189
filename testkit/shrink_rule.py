"""The coverage bench's shrinking rule (:func:`shrink`): a small config from a model type's default config.

Every width, feed-forward size, layer count, head count, expert count, vocabulary, image and patch size is set by
the constants below, sub-configs too, with the size relations of :mod:`testkit.shrink_fit` (and
:mod:`testkit.shrink_vision`, :mod:`testkit.shrink_sam`) kept, and the fields a default config leaves unset that
every checkpoint states. :mod:`testkit.coverage` (the bench's row of one type) uses it and re-exports :func:`shrink`.
"""

from __future__ import annotations

import re
from typing import Any

# ---------------------------------------------------------------------------------------------
# The shrinking rule
# ---------------------------------------------------------------------------------------------

WIDTH = 64  # every hidden width (so projections between sub-configs still match)
FFN = 128
LAYERS = 2
HEADS = 4
KV_HEADS = 2
HEAD_DIM = 16
VOCAB = 1024
EXPERTS = 4
EXPERTS_PER_TOKEN = 2
IMAGE = 64
PATCH = 16
MAX_PARAMS = 100_000_000  # a small config above this is not small: the next, gentler level is not tried

WIDTH_KEYS = {
    "hidden_size", "d_model", "n_embd", "n_embed", "embed_dim", "dim", "model_dim", "d_embed", "word_embed_proj_dim",
    "projection_dim", "out_hidden_size", "text_hidden_size", "encoder_hidden_size", "decoder_hidden_size",
    "projector_hidden_size", "output_hidden_size", "embedding_size", "hidden_dim", "vision_output_dim", "emb_dim",
}
FFN_KEYS = {
    "intermediate_size", "ffn_dim", "d_ff", "n_inner", "encoder_ffn_dim", "decoder_ffn_dim", "mlp_dim", "linear_units",
    "decoder_intermediate_size", "encoder_intermediate_size",
}
SMALL_FFN_KEYS = {"moe_intermediate_size", "shared_expert_intermediate_size", "expert_intermediate_size"}
LAYER_KEYS = {
    "num_hidden_layers", "n_layer", "num_layers", "encoder_layers", "decoder_layers", "num_decoder_layers", "n_layers",
    "num_encoder_layers", "depth", "decoder_num_layers", "encoder_num_layers",
}
HEAD_KEYS = {"num_attention_heads", "n_head", "encoder_attention_heads", "decoder_attention_heads", "num_heads", "n_heads", "attention_heads"}
KV_HEAD_KEYS = {"num_key_value_heads", "multi_query_group_num", "num_kv_heads"}
HEAD_DIM_KEYS = {"head_dim", "d_kv", "v_head_dim", "qk_nope_head_dim", "linear_key_head_dim", "linear_value_head_dim", "dim_head"}
FIXED = {
    "kv_lora_rank": 32, "q_lora_rank": 32, "qk_rope_head_dim": 16, "rotary_dim": 16, "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_num_heads": 4, "linear_head_dim": 16,
    "index_head_dim": 16, "index_n_heads": 2, "index_topk": 8, "n_group": 1, "num_expert_group": 1, "topk_group": 1,
}
IMAGE_TOKEN_KEYS = {"mm_tokens_per_image", "image_seq_length", "num_image_tokens"}  # -> (64 / 16)² = 16 patches
EXPERT_KEYS = {"num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts"}
EXPERT_TOPK_KEYS = {"num_experts_per_tok", "moe_topk", "top_k", "num_experts_per_token", "moe_k", "top_k_experts"}
IMAGE_KEYS = {"image_size"}
PATCH_KEYS = {"patch_size"}
TOKEN_ID = re.compile(r"(_token_id|_token_index|_token_ids)$")


def shrink(config: dict[str, Any], level: int = 1, *, recompute_layer_types: bool = True) -> dict[str, Any]:
    """A small config from a default one (a ``to_dict()``), sub-configs (any dict value) too.

    Level 1 (tried first): every hidden width key -> 64; feed-forward sizes -> 128 (expert and
    shared-expert sizes -> 32); layer counts -> 2; attention heads -> 4 (a count that divides 64: Swin's 3 -> 2), key/value heads -> 2
    (1 where 2 does not divide the heads; as many as the heads where they were), head dims -> 16 (MLA ranks 32, rope part and rotary_dim 16); vocab ->
    1024, with every token id at or above it moved to a distinct id at the top of the new vocab;
    experts -> 4, experts per token -> 2, expert groups -> 1; image size -> 64 (kept for a windowed hierarchy: Swin's last stage holds a window), patch size -> 16
    (where larger), image tokens per image -> 16; lists of per-stage depths -> 1 each. Never raised, only lowered.
    Level 2: only layers, vocab and experts (widths, heads and image sizes kept).
    Level 3: only layers.
    At every level, lists as long as the old layer count are cut to the new one and ``layer_types``
    is set to ``None`` so that the config recomputes it (where the config cannot, as a second try,
    ``recompute_layer_types=False``, it is cut like the other lists), and per-layer overrides
    (``per_layer_config``) keep the layers left; a backbone's ``out_features`` and ``out_indices``
    keep the stages left (:func:`_fit_stages`); a default without a value its checkpoints state gets
    one (no ``head_dim``: hidden / heads; per-layer and text vocabularies -> 1024, KV sharing across layers off; no expert count beside a top-k: 4 experts, top 2; no
    vocabulary: 1024; no key/value heads: as many as the heads); state-space widths follow the new
    hidden size (``mamba_n_heads * mamba_d_head`` and Mamba2's ``num_heads * head_dim`` equal
    ``expand * hidden_size``, groups 1); an encoder-decoder without ``decoder_start_token_id`` gets
    its ``pad_token_id`` there, as T5's checkpoints state it.
    """
    config = _omni_vision_start(config)
    small = _shrink(dict(config), level, _token_map(config) if level <= 2 else {}, recompute_layer_types)
    if level == 1:  # the relations between sizes the real forward needs (testkit/shrink_fit.py's docstring)
        from testkit.shrink_fit import fit

        fit(config, small, width_keys=WIDTH_KEYS, width=WIDTH, ffn=FFN)
    return small


def _omni_vision_start(config: dict[str, Any]) -> dict[str, Any]:
    """Qwen2.5-Omni's thinker reads ``vision_start_token_id`` (its 3-D rotary positions), which its config class
    leaves to the checkpoint (only the talker's declares it): Qwen2.5-Omni's checkpoints state the Qwen2
    tokenizer's ``<|vision_start|>``, 151652, in the thinker config (Qwen3-Omni's thinker too). Added where missing (the thinker alone, or
    inside the whole model's ``thinker_config``). Voxtral's default has no ``audio_token_id`` either; its checkpoints
    state 24, the ``[AUDIO]`` id its processor writes. Higgs Audio V2's default ``codebook_size`` (1024) leaves out
    the stream BOS and EOS codes its processor adds (1024, 1025): its checkpoints state 1026. Gemma 4's default has
    no vision tower; its checkpoints state one (the vision config class's defaults, then shrunk), as EmbeddingGemma 2's
    (Gemma 4's vision config)."""
    if config.get("model_type") == "qwen2_5_omni" and isinstance(config.get("thinker_config"), dict):
        return {**config, "thinker_config": _omni_vision_start(config["thinker_config"])}
    if config.get("model_type") in ("qwen2_5_omni_thinker", "qwen3_omni_moe_thinker") \
            and config.get("vision_start_token_id") is None:
        return {**config, "vision_start_token_id": 151652}
    if config.get("model_type") in ("gemma4", "gemma4_unified") and config.get("vision_config") is None:
        # Gemma 4's config class leaves its vision tower optional (None by default); its checkpoints state one
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING

        return {**config, "vision_config": CONFIG_MAPPING[config["model_type"]].sub_configs["vision_config"]().to_dict()}
    if config.get("model_type") == "embedding_gemma2" and config.get("vision_config") is None:
        # EmbeddingGemma 2 reuses Gemma 4's vision tower verbatim (its config's sub-config spec: gemma4_vision)
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING

        return {**config, "vision_config": CONFIG_MAPPING["gemma4_vision"]().to_dict()}
    if config.get("model_type") == "aria" and isinstance(config.get("vision_config"), dict) \
            and config["vision_config"].get("patch_size") != 14:
        # Aria's checkpoints state 14 px patches (980 / 14 = 70 a side: the 4900 of projector_patch_to_query_dict)
        return {**config, "vision_config": {**config["vision_config"], "patch_size": 14}}
    if config.get("model_type") == "voxtral" and config.get("audio_token_id") is None:
        return {**config, "audio_token_id": 24}  # Voxtral's checkpoints, as VoxtralProcessor's constant [AUDIO] id
    if config.get("model_type") == "higgs_audio_v2" and isinstance(config.get("audio_stream_eos_id"), int) \
            and config.get("codebook_size", 0) <= config["audio_stream_eos_id"]:
        # its converted checkpoints: codebook_size 1026, the codec's 1024 codes and the stream BOS and EOS (1024, 1025)
        return {**config, "codebook_size": max(config["audio_stream_bos_id"], config["audio_stream_eos_id"]) + 1}
    return config


def _token_map(config: dict[str, Any]) -> dict[int, int]:
    ids: set[int] = set()

    def walk(d: dict[str, Any]) -> None:
        for key, value in d.items():
            if not isinstance(key, str) or key in ("id2label", "label2id"):
                continue
            if isinstance(value, dict):
                walk(value)
            elif TOKEN_ID.search(key) or key in ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id"):
                for v in value if isinstance(value, list) else [value]:
                    if isinstance(v, int) and not isinstance(v, bool) and v >= VOCAB:
                        ids.add(v)

    walk(config)
    return {old: VOCAB - 1 - i for i, old in enumerate(sorted(ids))}


def _divisor(heads: Any) -> Any:
    """A head count that divides the new width (Swin's 3 first-stage heads on 64 channels: 2)."""
    if not isinstance(heads, int) or isinstance(heads, bool) or heads <= 0:
        return heads
    while WIDTH % heads:
        heads -= 1
    return heads


def _lower(value: Any, target: int) -> Any:
    return min(value, target) if isinstance(value, int) and not isinstance(value, bool) and value > 0 else value


def _shrink(d: dict[str, Any], level: int, tokens: dict[int, int], recompute: bool = True) -> dict[str, Any]:
    old_layers = next((d[k] for k in ("num_hidden_layers", "n_layer", "num_layers") if isinstance(d.get(k), int)), None)
    out: dict[str, Any] = {}
    for key, value in d.items():
        if not isinstance(key, str) or key in ("id2label", "label2id"):
            out[key] = value
            continue
        if isinstance(value, dict):
            out[key] = _shrink(value, level, tokens, recompute)
            continue
        if key in LAYER_KEYS and key == "num_layers" and isinstance(d.get("depths"), list):
            out[key] = value  # Swin's stage count (len(depths)): the stages stay, each one block deep
        elif key in LAYER_KEYS:
            out[key] = _lower(value, LAYERS)
        elif level <= 2 and key in ("vocab_size_per_layer_input", "text_vocab_size"):  # Gemma 3n/4's per-layer table, CSM's text
            out[key] = _lower(value, VOCAB)
        elif level <= 2 and key == "num_kv_shared_layers" and isinstance(value, int):
            out[key] = 0  # Gemma 3n's last layers reuse earlier ones' KV: two layers cannot hold a producer of each kind
        elif level <= 2 and key in ("vocab_size", "decoder_vocab_size"):  # Marian's decoder vocabulary too
            out[key] = VOCAB if value is None and key == "vocab_size" and "hidden_size" in d else _lower(value, VOCAB)
        elif level <= 2 and key in EXPERT_KEYS:
            # None beside a top-k key (Dots1, DiffusionGemma: the modeling code builds the experts): its checkpoints state one
            out[key] = EXPERTS if value is None and any(k in d for k in EXPERT_TOPK_KEYS) else _lower(value, EXPERTS)
        elif level <= 2 and key in EXPERT_TOPK_KEYS:
            # None where the config has experts (DeepSeek-V2's default): its checkpoints state one (V2: 6)
            has_experts = any((isinstance(d.get(k), int) and d[k] > 1) or (k in d and d[k] is None) for k in EXPERT_KEYS)
            out[key] = EXPERTS_PER_TOKEN if value is None and has_experts else _lower(value, EXPERTS_PER_TOKEN)
        elif level <= 2 and (TOKEN_ID.search(key) or key in ("pad_token_id", "bos_token_id", "eos_token_id")):
            out[key] = [tokens.get(v, v) for v in value] if isinstance(value, list) else tokens.get(value, value)
        elif level == 1 and key in WIDTH_KEYS:
            out[key] = _lower(value, WIDTH)
        elif level == 1 and key in FFN_KEYS:
            out[key] = _lower(value, FFN)
        elif level == 1 and key in SMALL_FFN_KEYS:
            out[key] = _lower(value, 32)
        elif level == 1 and key in HEAD_KEYS:
            out[key] = _divisor(_lower(value, HEADS)) if not isinstance(value, list) else [_divisor(_lower(v, HEADS)) for v in value]
        elif level == 1 and key in HEAD_DIM_KEYS:
            out[key] = _lower(value, HEAD_DIM)
        elif level == 1 and key in FIXED:
            out[key] = _lower(value, FIXED[key])
        elif level == 1 and key in IMAGE_KEYS and isinstance(d.get("window_size"), int) and isinstance(d.get("depths"), list):
            out[key] = value  # a windowed hierarchy (Swin, Donut-Swin): its last stage must still hold a window
        elif level == 1 and key in IMAGE_KEYS:
            out[key] = _lower(value, IMAGE) if not isinstance(value, list) else [_lower(v, IMAGE) for v in value]
        elif level == 1 and key in PATCH_KEYS:
            out[key] = _lower(value, PATCH) if not isinstance(value, list) else [_lower(v, PATCH) for v in value]
        elif level == 1 and key in IMAGE_TOKEN_KEYS:
            out[key] = _lower(value, (IMAGE // PATCH) ** 2)
        elif level == 1 and key == "depths" and isinstance(value, list):
            out[key] = [_lower(v, 1) for v in value]
        else:
            out[key] = value
    if level == 1:
        heads = next((out[k] for k in HEAD_KEYS if isinstance(out.get(k), int)), None)
        old_heads = next((d[k] for k in HEAD_KEYS if isinstance(d.get(k), int)), None)
        for key in KV_HEAD_KEYS:
            if key == "num_key_value_heads" and key in out and out[key] is None and heads and "head_dim" in out:
                out[key] = heads  # Nemotron's default has none: multi-head attention, as the config documents
            elif isinstance(out.get(key), int) and heads:
                kv = heads if d[key] == old_heads else _lower(out[key], KV_HEADS)  # multi-head attention stays so
                out[key] = kv if heads % kv == 0 else 1
    new_layers = next((out[k] for k in ("num_hidden_layers", "n_layer", "num_layers") if isinstance(out.get(k), int)), None)
    if isinstance(old_layers, int) and isinstance(new_layers, int) and new_layers < old_layers:
        for key, value in list(out.items()):
            if isinstance(value, list) and len(value) == old_layers and (key != "layer_types" or not recompute):
                out[key] = value[:new_layers]
    if isinstance(new_layers, int) and isinstance(out.get("per_layer_config"), dict):
        # overrides keyed by layer index ("05": {...}; Gemma 4, Dots3): only the layers that are left
        out["per_layer_config"] = {k: v for k, v in out["per_layer_config"].items() if not str(k).isdigit() or int(k) < new_layers}
    if "layer_types" in out and recompute:
        out["layer_types"] = None
    _fit_stages(out, new_layers)
    if out.get("is_encoder_decoder") and out.get("pad_token_id") is None and isinstance(out.get("decoder"), dict):
        out["pad_token_id"] = out["decoder"].get("pad_token_id")  # EncoderDecoderModel: its decoder's (its docs set both ids)
    if out.get("is_encoder_decoder") and out.get("decoder_start_token_id") is None and isinstance(out.get("pad_token_id"), int):
        out["decoder_start_token_id"] = out["pad_token_id"]  # as T5's checkpoints state it (transformers 5's default has none)
    if all(isinstance(out.get(k), int) for k in ("num_layers_per_stack", "H_cycles", "L_cycles", "num_hidden_layers")):
        # HRM: its cache holds a slot per layer and cycle, num_hidden_layers = H_cycles * (L_cycles + 1) * num_layers_per_stack
        out["num_layers_per_stack"] = 1
        out["num_hidden_layers"] = out["H_cycles"] * (out["L_cycles"] + 1)
    _query_token_id(out)
    _image_context_id(out)
    if "prediction_length" in out and out["prediction_length"] is None and "context_length" in out:
        out["prediction_length"] = 24  # Autoformer, Informer, TimeSeriesTransformer: required, stated by each checkpoint
    _checkpoint_fields(out)
    if "num_sliding_attention_heads" in out and out.get("sliding_window", 0) is None:
        out["sliding_window"] = 16  # Step3p7 builds its sliding mask always; its default leaves the window to the checkpoint
    factor = out.get("qk_dim_factor")
    if level == 1 and isinstance(factor, float) and factor > 0 and isinstance(out.get("hidden_size"), int) and (out["hidden_size"] * factor) % 64:
        out["hidden_size"] = int(64 / factor)  # xLSTM's cache rounds hidden * qk_dim_factor up to a multiple of 64, its layers do not
    for alias, of in (("embedding_dim", "hidden_size"), ("num_blocks", "num_hidden_layers"),  # xLSTM's second names
                      ("upsample_groups", "hidden_size"), ("adapter_in_dim", "hidden_size"),
                      ("adapter_input_size", "hidden_size")):  # Mimi's depthwise up-sampling: one group per channel
        if isinstance(d.get(alias), int) and d.get(alias) == d.get(of) and isinstance(out.get(of), int):
            out[alias] = out[of]
    if level == 1:
        _fit_ssm(out)
        heads = next((out[k] for k in HEAD_KEYS if isinstance(out.get(k), int)), None)
        hidden = next((out[k] for k in ("hidden_size", "d_model") if isinstance(out.get(k), int)), None)
        if "head_dim" in out and out["head_dim"] is None and heads and hidden:
            out["head_dim"] = hidden // heads  # a default without one (Ministral, HunYuan): its checkpoints state it
        if any(d.get(k) is None and isinstance(out.get(k), int) for k in EXPERT_KEYS):  # experts given above: their sizes too
            for key in ("moe_intermediate_size", "expert_intermediate_size"):
                if key in out and out[key] is None:
                    out[key] = 32
            if "n_shared_experts" in out and out["n_shared_experts"] is None:
                out["n_shared_experts"] = 1
        qsa = {"indexer_n_heads": 2, "indexer_kv_heads": 1, "indexer_head_dim": HEAD_DIM, "indexer_budget": 16, "indexer_compress_ratio": 4}
        if all(k in out and out[k] is None for k in qsa):  # Qwen4-Exp's default leaves its indexed attention unset: its checkpoints set it
            out.update(qsa)
        if isinstance(out.get("index_topk"), int) and isinstance(out.get("index_kpool"), int) and out["index_topk"] % out["index_kpool"]:
            out["index_topk"] = out["index_kpool"]  # GLM-5-Next selects whole pools of keys
        if all(isinstance(out.get(k), int) for k in ("qk_head_dim", "qk_nope_head_dim", "qk_rope_head_dim")):
            out["qk_head_dim"] = out["qk_nope_head_dim"] + out["qk_rope_head_dim"]  # MLA: the query head is both parts
            if isinstance(d.get("head_dim"), int) and d["head_dim"] == d["qk_nope_head_dim"] + d["qk_rope_head_dim"]:
                out["head_dim"] = out["qk_head_dim"]  # Mistral4: head_dim is the whole query head (rotary part by partial_rotary_factor)
    return out


def _query_token_id(out: dict[str, Any]) -> None:
    """BLIP-2, InstructBLIP(-Video): the defaults leave ``image_token_index`` (``video_token_index``) unset, but
    the Hub checkpoints state it (since transformers 4.47 their processors write ``num_query_tokens`` ``<image>``
    tokens, a token added after the tokenizer's words inside the embedding; the forward finds the Q-Former's
    outputs' places by it): the free id at the top of the text vocabulary."""
    text = out.get("text_config")
    if not isinstance(out.get("num_query_tokens"), int) or not isinstance(text, dict) or not isinstance(text.get("vocab_size"), int):
        return
    for key in ("image_token_index", "video_token_index"):
        if key in out and out[key] is None:
            taken = {v for k, v in {**text, **out}.items() if isinstance(v, int) and (TOKEN_ID.search(k) or k.endswith("token_id"))}
            out[key] = next(i for i in range(text["vocab_size"] - 1, 0, -1) if i not in taken)


def _image_context_id(out: dict[str, Any]) -> None:
    """Nemotron-3-Nano-Omni: the default leaves ``image_token_id`` unset, but every checkpoint states it (as
    ``img_context_token_id``, the tokenizer's ``<image>``; the forward finds the image features' places by it): the
    free id at the top of the small text vocabulary, which no other special token uses (the value changes no
    shape, hence no memory)."""
    text = out.get("text_config")
    if out.get("model_type") != "nemotron_h_omni" or out.get("image_token_id") is not None \
            or not isinstance(text, dict) or not isinstance(text.get("vocab_size"), int):
        return
    taken = {v for k, v in {**text, **out}.items() if isinstance(v, int) and (TOKEN_ID.search(k) or k.endswith("_id"))}
    out["image_token_id"] = next(i for i in range(text["vocab_size"] - 1, 0, -1) if i not in taken)


def _checkpoint_fields(out: dict[str, Any]) -> None:
    """Fields a default config leaves unset that the model's forward needs and every checkpoint states
    (the real forward fails without them, as the estimate does):

    - ESM: ``pad_token_id`` (its position ids count the tokens that are not padding) and ``mask_token_id``:
      1 and 32 as in facebook/esm2_* (vocabulary of 33);
    - HunYuan-VL's text model: ``mrope_section`` (its rotary module splits the half head across them; the
      default has none): tencent/HunyuanOCR's ``xdrope_section`` [16, 16, 16, 16] of a 128-wide head, i.e.
      four equal parts of the small head's half;
    - MiniCPM-V 4.6 / 4.7 and MiniCPM-o OCR: ``image_token_id`` (the forward runs the vision tower only where it
      is set; MiniCPM-V 4.6's checkpoints state 248056, the Qwen3.5 tokenizer's ``<|image_pad|>``, inside the text
      vocabulary) and 4.7's markers' ids (``image_start_id``, ``image_end_id``, ``slice_start_id``, ``slice_end_id``,
      ``newline_id``: its 3-D rotary positions find the crops by them): free ids at the top of the small vocabulary,
      which no other special token uses (the values change no shape, hence no memory); and ``insert_layer_id`` (the
      window merger runs after that vision layer, 6 of 27 in the checkpoints; in "16x" mode the processor counts
      its merge) inside the shrunk tower: after its first layer of two."""
    if out.get("model_type") in ("minicpmv4_6", "minicpmv4_7", "minicpm_ocr"):
        _minicpm_fields(out)
    if out.get("model_type") == "esm" and out.get("pad_token_id") is None:
        out["pad_token_id"], out["mask_token_id"] = 1, 32
    if out.get("model_type") == "hunyuan_vl_text":
        rope = dict(out.get("rope_parameters") or {"rope_type": "default", "rope_theta": 10000.0})
        if rope.get("mrope_section") is None and rope.get("xdrope_section") is None:
            head = out.get("head_dim") or out["hidden_size"] // out["num_attention_heads"]
            rope["mrope_section"] = [head // 8] * 4
            out["rope_parameters"] = rope


def _minicpm_fields(out: dict[str, Any]) -> None:
    """MiniCPM's checkpoint fields (see :func:`_checkpoint_fields`)."""
    text, vision = out.get("text_config"), out.get("vision_config")
    if not isinstance(text, dict) or not isinstance(text.get("vocab_size"), int) or not isinstance(vision, dict):
        return
    taken = {v for k, v in {**text, **out}.items() if isinstance(v, int) and (TOKEN_ID.search(k) or k.endswith("_id"))}
    free = (i for i in range(text["vocab_size"] - 1, 0, -1) if i not in taken)
    for key in ("image_token_id", "image_start_id", "image_end_id", "slice_start_id", "slice_end_id", "newline_id"):
        if key in out and out[key] is None:
            out[key] = next(free)
    layers = vision.get("num_hidden_layers")
    if isinstance(layers, int) and isinstance(out.get("insert_layer_id"), int) and out["insert_layer_id"] >= layers:
        out["insert_layer_id"] = max(layers - 2, 0)


def _fit_stages(out: dict[str, Any], layers: Any) -> None:
    """A backbone's ``out_indices`` / ``out_features`` cut to the stages left: a backbone with ``depths``
    keeps its stages (each is only shallower), so its choice stays (D-FINE, MaskFormer read several); one
    whose stages are its layers (BEiT, Data2Vec-vision) keeps the indices that still exist, else its last."""
    stages = len(out["depths"]) if isinstance(out.get("depths"), list) else layers if isinstance(layers, int) else None
    for key in ("out_features", "out_indices"):
        value = out.get(key)
        if not isinstance(value, list) or stages is None:
            continue
        kept = [v for v in value if _stage_number(v) is not None and _stage_number(v) <= stages]  # type: ignore[operator]
        out[key] = kept if kept else ([stages] if key == "out_indices" else None)
    if isinstance(out.get("out_indices"), list) and isinstance(out.get("out_features"), list) \
            and len(out["out_indices"]) != len(out["out_features"]):
        out["out_features"] = None  # the config names them from the indices


def _stage_number(stage: Any) -> int | None:
    """1 for ``"stage1"`` or 1; 0 for ``"stem"``; a negative index counts as the last (0 here)."""
    if isinstance(stage, int) and not isinstance(stage, bool):
        return max(stage, 0)
    if isinstance(stage, str):
        digits = re.sub(r"\D", "", stage)
        return int(digits) if digits else 0
    return None


def _fit_ssm(out: dict[str, Any]) -> None:
    hidden = next((out[k] for k in ("hidden_size", "d_model") if isinstance(out.get(k), int)), None)
    if hidden is None:
        return
    heads = out.get("num_attention_heads")
    if isinstance(out.get("attention_hidden_size"), int) and isinstance(heads, int):  # Zamba's attention on [x, x0]
        out["attention_hidden_size"], out["attention_head_dim"] = 2 * hidden, 2 * hidden // heads
    elif isinstance(out.get("attention_hidden_size"), int):  # RWKV: its time mixing at the hidden size (its default)
        out["attention_hidden_size"] = hidden
    if "mamba_n_heads" in out and "mamba_d_head" in out:
        inner = int((out.get("mamba_expand") or 2) * hidden)
        out["mamba_d_head"], out["mamba_n_heads"] = HEAD_DIM, max(1, inner // HEAD_DIM)
        if isinstance(out.get("mamba_d_ssm"), int):  # Falcon-H1: its SSM width is the heads' (its validator's rule)
            out["mamba_d_ssm"] = out["mamba_d_head"] * out["mamba_n_heads"]
        if "mamba_n_groups" in out:
            out["mamba_n_groups"] = 1
    elif "n_mamba_heads" in out and isinstance(out.get("mamba_headdim"), int):  # Zamba2 (its __post_init__ rule)
        out["mamba_headdim"] = int((out.get("mamba_expand") or 2) * hidden) // out["n_mamba_heads"]
    elif all(k in out for k in ("expand", "n_groups", "num_heads", "head_dim")) and isinstance(out["num_heads"], int):
        out["head_dim"] = max(1, int(out["expand"] * hidden) // out["num_heads"])
        out["n_groups"] = 1
