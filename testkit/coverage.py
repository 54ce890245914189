"""One model type of transformers' registry through the estimator, against a real CPU build.

Shared by ``bench/coverage.py`` (the whole registry) and ``tests/test_coverage.py`` (a fixed sample).

For a ``model_type``: its main task class (:func:`task_class`), a small config derived from its
default config by :func:`shrink` (the rule is in its docstring), the model built for real on the
CPU from that config (saved and loaded back with ``from_pretrained(dtype=float32)``, its parameter
and buffer storages counted as ``tests/test_exact_bytes.py`` counts them), then the estimator the
public way — ``estimate(folder)`` on a folder holding only that config.json — in modes load,
inference and training. :func:`run_type` returns one plain dict per type (the bench's row). A model whose
BatchNorm refuses a batch of one in training (the real run fails too; the estimator refuses with that
reason) is trained at batch 2, and its training entry says so (``batch_size``, ``refused_at_batch_1``).
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import tempfile
import time
import traceback
import warnings
from pathlib import Path
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


# ---------------------------------------------------------------------------------------------
# Task class and category
# ---------------------------------------------------------------------------------------------

# (task, mapping name in transformers.models.auto.modeling_auto), first match wins. Seq2seq and
# masked LM come before causal LM: Whisper, BART and Marian are also in the causal-LM mapping (their
# decoder alone), BERT and RoBERTa too (BertLMHeadModel); their published class is the other one.
TASKS = (
    ("image-text-to-text", "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES"),
    ("speech-seq2seq", "MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES"),
    ("seq2seq", "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES"),
    ("masked-lm", "MODEL_FOR_MASKED_LM_MAPPING_NAMES"),
    ("causal-lm", "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES"),
    ("image-classification", "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES"),
    ("base", "MODEL_MAPPING_NAMES"),
)
SPEECH_MAPPINGS = ("MODEL_FOR_CTC_MAPPING_NAMES", "MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES", "MODEL_FOR_TEXT_TO_WAVEFORM_MAPPING_NAMES",
                   "MODEL_FOR_TEXT_TO_SPECTROGRAM_MAPPING_NAMES", "MODEL_FOR_AUDIO_XVECTOR_MAPPING_NAMES")
VISION_MAPPINGS = ("MODEL_FOR_IMAGE_MAPPING_NAMES", "MODEL_FOR_BACKBONE_MAPPING_NAMES", "MODEL_FOR_OBJECT_DETECTION_MAPPING_NAMES",
                   "MODEL_FOR_IMAGE_SEGMENTATION_MAPPING_NAMES", "MODEL_FOR_SEMANTIC_SEGMENTATION_MAPPING_NAMES",
                   "MODEL_FOR_DEPTH_ESTIMATION_MAPPING_NAMES", "MODEL_FOR_VIDEO_CLASSIFICATION_MAPPING_NAMES",
                   "MODEL_FOR_MASK_GENERATION_MAPPING_NAMES", "MODEL_FOR_KEYPOINT_DETECTION_MAPPING_NAMES")
HYBRID_WORDS = ("mamba", "rwkv", "xlstm", "recurrent", "lfm2", "jamba", "zamba", "bamba", "falcon_h1", "hymba", "nemotron_h",
                "granitemoehybrid", "qwen3_next", "minimax", "plamo2", "kimi_linear", "olmo_hybrid")
HYBRID_KEYS = ("ssm_state_size", "mamba_d_state", "state_size", "linear_num_key_heads", "conv_L_cache", "mamba_n_heads")
CATEGORIES = ("text decoder", "VLM", "speech", "encoder", "vision", "hybrid/SSM", "MoE", "other")


def task_class(model_type: str) -> tuple[str, str] | None:
    """``(task, class name)`` of the first mapping of :data:`TASKS` that holds ``model_type``."""
    from transformers.models.auto import modeling_auto

    for task, mapping in TASKS:
        name = getattr(modeling_auto, mapping).get(model_type)
        if isinstance(name, (list, tuple)):
            name = name[0]
        if name:
            return task, name
    return None


def _in_mapping(model_type: str, mappings: tuple[str, ...]) -> bool:
    from transformers.models.auto import modeling_auto

    return any(model_type in getattr(modeling_auto, m, {}) for m in mappings)


def _keys(d: dict[str, Any]) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in d.items():
        if isinstance(value, dict):
            for k, v in _keys(value).items():
                flat.setdefault(k, v)
        else:
            flat.setdefault(key, value)
    return flat


def category(model_type: str, task: str, config: dict[str, Any]) -> str:
    """One of :data:`CATEGORIES`, from the type's task, mappings and config keys (first match:
    hybrid/SSM, MoE, VLM, speech, vision, encoder, text decoder)."""
    flat = _keys(config)
    layer_kinds = {str(v) for key in ("layer_types", "layers_block_type", "block_types") for v in (flat.get(key) or [])}
    if any(w in model_type for w in HYBRID_WORDS) or any(k in flat for k in HYBRID_KEYS) \
            or any(w in kind for kind in layer_kinds for w in ("mamba", "linear", "conv", "ssm", "recurrent", "rnn")):
        return "hybrid/SSM"
    if any(isinstance(flat.get(k), int) and flat[k] > 1 for k in EXPERT_KEYS):
        return "MoE"
    if task == "image-text-to-text" or _in_mapping(model_type, ("MODEL_FOR_MULTIMODAL_LM_MAPPING_NAMES",)) \
            or ("vision_config" in config and "text_config" in config):
        return "VLM"
    if task == "speech-seq2seq" or _in_mapping(model_type, SPEECH_MAPPINGS) or "audio_config" in config or "num_mel_bins" in flat:
        return "speech"
    if task == "image-classification" or _in_mapping(model_type, VISION_MAPPINGS) or ("image_size" in flat and "vocab_size" not in flat):
        return "vision"
    if task == "masked-lm" or (task == "base" and "vocab_size" in flat):
        return "encoder"
    if task in ("causal-lm", "seq2seq"):
        return "text decoder"
    return "other"


# ---------------------------------------------------------------------------------------------
# Failure causes
# ---------------------------------------------------------------------------------------------

def cause(text: str) -> str:
    """A failure message normalised to a cause: numbers, quoted names, shapes and paths taken out."""
    text = text.strip().splitlines()[0] if text.strip() else "?"
    text = re.sub(r"/[\w./+-]+", "<path>", text)
    text = re.sub(r"'([^']*)'|\"([^\"]*)\"|`([^`]*)`", _quoted, text)
    text = re.sub(r"\[[\d, ]*\]|\([\d, ]*\)", "[…]", text)
    text = re.sub(r"0x[0-9a-f]+|\d+(\.\d+)?", "N", text)
    text = re.sub(r"\b[A-Z]\w+(For\w+|Model|Config)\b", "<Class>", text)
    return re.sub(r"\s+", " ", text)[:140]


def _quoted(m: re.Match[str]) -> str:
    """A quoted field or attribute name stays (it is the cause); class names, values and code go."""
    inner = next(g for g in m.groups() if g is not None)
    return f"'{inner}'" if re.fullmatch(r"[a-z_][a-z0-9_]{0,40}|NoneType|tuple|list|dict", inner) else "'…'"


def _formula_reason(notes: tuple[str, ...] | list[str]) -> str:
    for note in notes:
        m = re.match(r"simulation failed \((.*)\); formula used", note, re.S)
        if m:
            return m.group(1)
    return "formula without a failure note"


# ---------------------------------------------------------------------------------------------
# One type
# ---------------------------------------------------------------------------------------------

def small_config(model_type: str) -> tuple[dict[str, Any] | None, str, Any, int | None, str | None]:
    """``(config dict as saved, class name, real model, level, reason)``: the first level of
    :func:`shrink` whose config builds for real on the CPU with at most :data:`MAX_PARAMS`
    parameters; ``None`` and the reason where none does."""
    import torch
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    found = task_class(model_type)
    if found is None:
        return None, "", None, None, "no model class in the auto mappings"
    task, name = found
    cls = getattr(transformers, name, None)
    if cls is None:
        return None, name, None, None, f"{name} is not exported by transformers"
    try:
        default = CONFIG_MAPPING[model_type]().to_dict()
    except Exception as exc:  # noqa: BLE001 - a default config the library cannot make is a skip reason
        return None, name, None, None, f"default config: {type(exc).__name__}: {exc}"
    try:
        default_layers = _layer_kinds(CONFIG_MAPPING[model_type]())
    except Exception:  # noqa: BLE001 - a default config without layer kinds
        default_layers = []
    reasons: list[str] = []
    for level, recompute in ((1, True), (1, False), (2, True), (2, False), (3, True), (3, False)):
        shrunk = _follow_validator(_derive(shrink(default, level, recompute_layer_types=recompute), CONFIG_MAPPING[model_type], level),
                                   CONFIG_MAPPING[model_type])
        shrunk["architectures"] = [name]
        # a hybrid with no attention layer left keeps one (two: Zamba's shared block is tied across
        # its attention layers), else the plain shrunk config (Qwen4Exp's default cannot build its attention layer)
        tries = []
        for n in (1, 2):
            small = copy.deepcopy(shrunk)
            try:
                if _keep_attention(small, CONFIG_MAPPING[model_type].from_dict(dict(small)), default, default_layers, n):
                    tries.append(small)
            except Exception:  # noqa: BLE001 - a config that does not build: the plain try below says why
                break
        tries.append(shrunk)
        for small in tries:
            try:
                hf_config = CONFIG_MAPPING[model_type].from_dict(dict(small))
                with torch.device("meta"):
                    meta = cls._from_config(hf_config, dtype=torch.float32)
                params = sum(p.numel() for p in meta.parameters())
                if params > MAX_PARAMS:
                    reasons.append(f"level {level}: {params:,} parameters (more than {MAX_PARAMS:,})")
                    continue
                if _fit_mrope(small, meta):  # the rotary sections follow the smaller head dim
                    hf_config = CONFIG_MAPPING[model_type].from_dict(dict(small))
                del meta
                torch.manual_seed(0)
                model = cls._from_config(hf_config, dtype=torch.float32)
                return small, name, model, level, None
            except Exception as exc:  # noqa: BLE001 - why this level does not build is the skip reason
                reasons.append(f"level {level}: {type(exc).__name__}: {str(exc)[:200]}")
    unique = list(dict.fromkeys(reasons))
    return None, name, None, None, "; ".join(unique)


# a config validator's rule between two widths: "`a.b` (128) must equal `c.d // 4` (16)" (FunASR-Nano, Pocket TTS, Nemotron 3)
_EQUAL_RULE = re.compile(r"`([\w.]+)` \((\d+)\) must (?:equal|match) (?:the [\w ]+)?`([\w.]+)(?: // \d+)?` \((\d+)\)")


def _follow_validator(small: dict[str, Any], config_class: Any, tries: int = 4) -> dict[str, Any]:
    """Where the config class's own validator says a width must equal another (a sub-config's width
    its projection reads), the first key takes the value the validator names, as the library's rule
    says; up to ``tries`` rules. Any other error is left to the build (the skip reason)."""
    for _ in range(tries):
        try:
            config_class.from_dict(dict(small))
            return small
        except Exception as exc:  # noqa: BLE001 - only a stated equality rule is followed
            found = _EQUAL_RULE.search(str(exc))
            if found is None:
                return small
            *parents, key = found.group(1).split(".")
            target = _resolve(small, parents)
            if not isinstance(target, dict) or key not in target or target[key] == int(found.group(4)):
                return small
            target[key] = int(found.group(4))
    return small


def _resolve(d: dict[str, Any], path: list[str]) -> dict[str, Any] | None:
    """The dict at ``path`` from ``d`` or from the first sub-config that holds it (a validator names paths from its own config)."""
    target: Any = d
    for part in path:
        target = target.get(part) if isinstance(target, dict) else None
    if isinstance(target, dict):
        return target
    for value in d.values():
        found = _resolve(value, path) if isinstance(value, dict) and path else None
        if found is not None:
            return found
    return None


DERIVED_KEYS = ("codebook_dim",)  # widths a config derives from others when None (EnCodec, X-Codec: the hidden size)


def _derive(small: dict[str, Any], config_class: Any, level: int) -> dict[str, Any]:
    """At level 1, the keys of :data:`DERIVED_KEYS` whose config class defaults them to None (it then
    derives them from the shrunk widths) set to None."""
    fields = getattr(config_class, "__dataclass_fields__", {})
    for key in DERIVED_KEYS:
        if level == 1 and key in small and key in fields and fields[key].default is None:
            small[key] = None
    return small


def _layer_kinds(hf_config: Any) -> list[str]:
    """The text config's per-layer kinds (``layer_types``: ``full_attention``, ``linear_attention``, ``conv``...)."""
    text = hf_config.get_text_config() if hasattr(hf_config, "get_text_config") else hf_config
    kinds = getattr(text, "layer_types", None)
    return [str(k) for k in kinds] if isinstance(kinds, (list, tuple)) else []


def _is_attention(kind: str) -> bool:
    return kind == "hybrid" or ("attention" in kind and kind != "linear_attention")


def _keep_attention(small: dict[str, Any], hf_config: Any, default: dict[str, Any], default_kinds: list[str], count: int = 1) -> bool:
    """A hybrid whose small config has no attention layer left keeps one, as its checkpoints have
    (transformers' own ``generate`` fails on a cache with no attention layer): the layer count is
    raised to the default config's first attention layer (its pattern kept, ``layer_types``
    recomputed); where the default has none (Bamba, GraniteMoeHybrid: the placement is per
    checkpoint), the last layer is made an attention layer. ``True`` when ``small`` was changed."""
    kinds = _layer_kinds(hf_config)
    if not kinds or any(_is_attention(k) for k in kinds):
        return False
    target: Any = small.get("text_config") if isinstance(small.get("text_config"), dict) else small
    key = next((k for k in ("num_hidden_layers", "n_layer", "num_layers") if isinstance(target.get(k), int)), None)
    if key is None:
        return False
    found = [i for i, k in enumerate(default_kinds) if _is_attention(k)]
    first = found[count - 1] if len(found) >= count else None
    if first is not None:
        if first + 1 <= target[key]:
            return False
        old = target[key]
        target[key] = first + 1
        full: Any = default.get("text_config") if isinstance(default.get("text_config"), dict) else default
        for name, value in list(target.items()):  # per-layer lists cut to the old count: the default's, cut to the new one
            if isinstance(value, list) and len(value) == old and isinstance(full.get(name), list) and len(full[name]) > first:
                target[name] = full[name][: first + 1]
        return True
    if found or count > 1:
        return False
    if "attn_layer_indices" in target:
        target["attn_layer_indices"] = [target[key] - 1]
        return True
    if "layer_types" in target and default_kinds and set(default_kinds) == {"linear_attention"} and "num_attention_heads" in target:
        target["layer_types"] = ["linear_attention"] * (target[key] - 1) + ["full_attention"]
        return True
    return False


def _fit_mrope(small: dict[str, Any], meta: Any) -> bool:
    """Multimodal rotary sections (``mrope_section``, default ``[16, 24, 24]`` for a head dim of 128)
    scaled to add up to the small head dim's ``head_dim / 2``, in the text config's ``rope_parameters``."""
    for module in meta.modules():
        section, inv_freq = getattr(module, "mrope_section", None), getattr(module, "inv_freq", None)
        if isinstance(section, (list, tuple)) and inv_freq is not None and sum(section) != inv_freq.shape[-1]:
            half = int(inv_freq.shape[-1])
            scaled = [max(1, round(s * half / sum(section))) for s in section]
            scaled[-1] += half - sum(scaled)
            target: Any = small.get("text_config") if isinstance(small.get("text_config"), dict) else small
            rope = dict(target.get("rope_parameters") or {"rope_type": "default", "rope_theta": 10000.0})
            rope["mrope_section"] = scaled
            target["rope_parameters"] = rope
            return True
    return False


def run_type(model_type: str, *, seq_len: int = 32, workdir: Path | None = None) -> dict[str, Any]:
    """The bench row of one ``model_type`` (plain data, JSON-ready)."""
    warnings.filterwarnings("ignore")
    found = task_class(model_type)
    row: dict[str, Any] = {"model_type": model_type, "task": found[0] if found else None, "class": found[1] if found else None}
    started = time.perf_counter()
    small, name, model, level, reason = small_config(model_type)
    row["build_s"] = round(time.perf_counter() - started, 2)
    try:
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING

        row["category"] = category(model_type, row["task"] or "base", CONFIG_MAPPING[model_type]().to_dict())
    except Exception:  # noqa: BLE001 - the category of a type whose default config fails
        row["category"] = "other"
    if small is None:
        row.update(status="skipped", skip_reason=reason)
        return row
    row["level"] = level
    tmp = Path(tempfile.mkdtemp(prefix=f"coverage_{model_type}_", dir=workdir))
    try:
        return _measure(row, model, small, tmp, seq_len)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _measure(row: dict[str, Any], model: Any, small: dict[str, Any], tmp: Path, seq_len: int) -> dict[str, Any]:
    """The real build's bytes, then ``estimate()`` in each mode on a folder holding only the config."""
    import torch

    from estimator import estimate
    from estimator.errors import EstimatorError
    from testkit.truth import storage_bytes

    saved, folder = tmp / "saved", tmp / "config_only"
    folder.mkdir()
    truth_how = "from_pretrained"
    try:
        model.save_pretrained(saved)
        real = type(model).from_pretrained(saved, dtype=torch.float32)
        config_json = json.loads((saved / "config.json").read_text())
    except Exception as exc:  # noqa: BLE001 - a model that cannot round-trip: counted as built
        real, truth_how = model, f"_from_config (save/load failed: {type(exc).__name__})"
        config_json = dict(small)
    row["truth_bytes"] = storage_bytes(real)
    row["truth_how"] = truth_how
    row["params"] = sum(p.numel() for p in real.parameters())
    del real, model
    (folder / "config.json").write_text(json.dumps(config_json))
    row["config"] = config_json
    for mode in ("load", "inference", "training"):
        t0 = time.perf_counter()
        entry: dict[str, Any] = {}
        try:
            try:
                result = estimate(str(folder), dtypes=["float32"], mode=mode, seq_len=seq_len)
            except EstimatorError as exc:
                if not _batch_one(mode, exc):
                    raise
                # the model's BatchNorm refuses a batch of one in training, as the real run does (the estimator
                # says so, estimator/peak/batchnorm.py): the step a user can run is the one at batch 2
                entry.update(batch_size=2, refused_at_batch_1=str(exc)[:300])
                result = estimate(str(folder), dtypes=["float32"], mode=mode, seq_len=seq_len, batch_size=2)
            r = result.row("float32")
            if mode == "load":
                entry.update(method=r.method, bytes=r.total_bytes, exact=r.total_bytes == row["truth_bytes"])
                entry["status"] = "ok" if entry["exact"] else "mismatch"
            else:
                entry.update(method=r.method, bytes=r.peak_bytes, inputs=simulated_inputs(r.notes))
                if r.peak_bytes is None:
                    entry.update(status="null", cause=cause("; ".join(r.notes) or "peak_bytes is null"))
                elif r.method == "simulated":
                    entry["status"] = "ok"
                else:
                    reason_text = _formula_reason(r.notes)
                    entry.update(status="formula", detail=reason_text[:500], cause=cause(reason_text))
        except EstimatorError as exc:
            entry.update(status="refused", error=type(exc).__name__, detail=str(exc)[:500],
                         cause=f"{type(exc).__name__}: {cause(str(exc))}")
        except Exception as exc:  # noqa: BLE001 - an internal error is what the bench counts
            entry.update(status="error", error=type(exc).__name__, detail=str(exc)[:500],
                         cause=f"internal {type(exc).__name__}: {cause(str(exc))}",
                         where=_where(traceback.format_exc()))
        entry["seconds"] = round(time.perf_counter() - t0, 2)
        row[mode] = entry
    row["status"] = "done"
    return row


def _batch_one(mode: str, exc: Exception) -> bool:
    """The estimator's refusal of training at batch 1 for a model whose BatchNorm sees one value per channel."""
    return mode == "training" and getattr(exc, "option", None) == "batch_size" and "one value per channel" in str(exc)


def _where(tb: str) -> str:
    """The innermost frame of the estimator in a traceback."""
    frames = re.findall(r'File "([^"]*/estimator/[^"]*)", line (\d+), in (\w+)', tb)
    if not frames:
        return ""
    path, line, func = frames[-1]
    return f"{path.split('/estimator/')[-1]}:{line} {func}"


def simulated_inputs(notes: tuple[str, ...] | list[str]) -> str:
    """What a simulated step was fed, from its notes (estimator.peak.media and the workloads word them:
    image tokens or ``pixel_values``; seconds of audio, ``input_values`` or ``input_features``; a protein's
    ``protein_input_ids``, estimator.peak.protein_inputs): "images", "audio", "protein + text", "text only (fallback)"
    where the model refused its media inputs, else "text"."""
    text = " ".join(notes)
    if "images or audio not simulated" in text:
        return "text only (fallback)"
    if "protein_input_ids" in text:
        return "protein + text"
    if " image tokens + " in text or "pixel_values" in text:
        return "images"
    if " s of audio at " in text or "input_values" in text or "input_features" in text:
        return "audio"
    return "text"
