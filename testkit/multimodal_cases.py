"""Tiny vision-language and speech models for checking the simulated peak with images and audio.

Each case is ``AutoConfig.for_model(model_type, **overrides)`` with the text and vision towers shrunk
(hidden 32-64, 1-2 layers, vocabularies of a few hundred ids, images of 32-64 px), built in float32
with ``AutoModelForImageTextToText`` / the speech class, as the estimator builds models.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch import nn

__all__ = ["MM_CASES", "MultimodalCase"]

_TEXT = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "vocab_size": 512, "max_position_embeddings": 2048, "head_dim": 16}
_VISION = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2}


@dataclass(frozen=True)
class MultimodalCase:
    name: str
    model_type: str
    config: dict[str, Any]
    cls: str = "AutoModelForImageTextToText"
    batch_size: int = 1
    seq_len: int = 32
    image_size: int | None = None
    max_new_tokens: int = 4
    extra: dict[str, Any] = field(default_factory=dict)

    def make_config(self) -> Any:
        from transformers import AutoConfig

        return AutoConfig.for_model(self.model_type, **self.config)

    def build_on(self, device: str, dtype: torch.dtype = torch.float32) -> nn.Module:
        import transformers

        cls = getattr(transformers, self.cls)
        with torch.device(device):
            config = self.make_config()
            return cls.from_config(config, dtype=dtype) if cls.__name__.startswith("Auto") else cls._from_config(config, dtype=dtype)


MM_CASES: dict[str, MultimodalCase] = {c.name: c for c in [
    MultimodalCase("llava", "llava", {
        "text_config": {"model_type": "llama", **_TEXT},
        "vision_config": {"model_type": "clip_vision_model", **_VISION, "image_size": 32, "patch_size": 8, "projection_dim": 32},
        "image_token_index": 500}),
    MultimodalCase("gemma3", "gemma3", {
        "text_config": {**_TEXT, "sliding_window": 64, "vocab_size": 600},
        "vision_config": {**_VISION, "image_size": 32, "patch_size": 8},
        "mm_tokens_per_image": 4, "boi_token_index": 501, "eoi_token_index": 502, "image_token_index": 503}),
    MultimodalCase("qwen2_5_vl", "qwen2_5_vl", {
        "text_config": {**_TEXT, "rope_parameters": {"rope_type": "default", "mrope_section": [2, 3, 3], "rope_theta": 10000.0}},
        "vision_config": {"depth": 1, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "patch_size": 8,
                          "spatial_merge_size": 2, "temporal_patch_size": 2, "out_hidden_size": 64, "window_size": 32,
                          "fullatt_block_indexes": [0]},
        "image_token_id": 500, "video_token_id": 501, "vision_start_token_id": 502, "vision_end_token_id": 503,
        "bos_token_id": 1, "eos_token_id": 2},
        image_size=64),
    MultimodalCase("idefics3", "idefics3", {
        "text_config": {"model_type": "llama", **_TEXT},
        "vision_config": {**_VISION, "image_size": 32, "patch_size": 8},
        "scale_factor": 2, "image_token_id": 500, "pad_token_id": 0}, image_size=64),
    MultimodalCase("smolvlm", "smolvlm", {
        "text_config": {"model_type": "llama", **_TEXT},
        "vision_config": {**_VISION, "image_size": 32, "patch_size": 8},
        "scale_factor": 2, "image_token_id": 500, "pad_token_id": 0}, image_size=64),
    MultimodalCase("paligemma", "paligemma", {
        "text_config": {"model_type": "gemma", **_TEXT},
        "vision_config": {**_VISION, "image_size": 32, "patch_size": 8, "projection_dim": 64},
        "image_token_index": 500, "projection_dim": 64, "hidden_size": 64}),
    MultimodalCase("mllama", "mllama", {
        "text_config": {**_TEXT, "cross_attention_layers": [1], "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2, "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}},
        "vision_config": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_global_layers": 1,
                          "attention_heads": 2, "image_size": 32, "patch_size": 8, "max_num_tiles": 4,
                          "intermediate_layers_indices": [0], "vision_output_dim": 64},
        "image_token_index": 500}, image_size=64),
    MultimodalCase("glm4v", "glm4v", {  # a grid family of estimator/peak/inputs/prompts/more_families.py
        "text_config": {**_TEXT, "rope_parameters": {"rope_type": "default", "mrope_section": [2, 3, 3], "rope_theta": 10000.0}},
        "vision_config": {"depth": 1, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "patch_size": 14,
                          "image_size": 56, "spatial_merge_size": 2, "temporal_patch_size": 2, "out_hidden_size": 64},
        "image_token_id": 500, "video_token_id": 501, "image_start_token_id": 502, "image_end_token_id": 503,
        "video_start_token_id": 504, "video_end_token_id": 505, "eos_token_id": 2}, image_size=56),
    MultimodalCase("llava_next", "llava_next", {  # anyres: a 32 px image on the 32x64 grid point -> base + 2 tiles
        "text_config": {"model_type": "llama", **_TEXT},
        "vision_config": {"model_type": "clip_vision_model", **_VISION, "image_size": 32, "patch_size": 8, "projection_dim": 32},
        "image_grid_pinpoints": [[32, 64], [64, 32], [64, 64]], "image_token_index": 500}),
    MultimodalCase("internvl", "internvl", {  # 64 px tiles of 8 px patches, pixel-shuffled by 0.5: 16 tokens per image
        "text_config": {"model_type": "qwen2", **_TEXT},
        "vision_config": {**_VISION, "image_size": [64, 64], "patch_size": [8, 8]},
        "downsample_ratio": 0.5, "image_seq_length": 16, "image_token_id": 500}),
    MultimodalCase("mistral3", "mistral3", {  # Pixtral tower, 2x2 patch merger, [IMG_BREAK] per row and [IMG_END]
        "text_config": {"model_type": "mistral", **_TEXT},
        "vision_config": {**_VISION, "image_size": 64, "patch_size": 8, "head_dim": 16},
        "spatial_merge_size": 2, "image_token_index": 500}),
    MultimodalCase("llava_onevision", "llava_onevision", {  # anyres_max_9 at 1 image, the base image only at 2
        "text_config": {"model_type": "qwen2", **_TEXT},
        "vision_config": {"model_type": "siglip_vision_model", **_VISION, "image_size": 32, "patch_size": 8},
        "image_grid_pinpoints": [[32, 32], [32, 64], [64, 32], [64, 64]], "vision_feature_select_strategy": "full",
        "vision_feature_layer": -1, "image_token_index": 500, "video_token_index": 501}, image_size=48),
    MultimodalCase("fuyu", "fuyu", {  # no vision tower: 16 px patches projected into the decoder (one image per prompt)
        "text_config": {"model_type": "persimmon", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                        "num_attention_heads": 4, "vocab_size": 512, "max_position_embeddings": 2048},
        "image_size": 64, "patch_size": 16, "image_token_id": 500}),
    MultimodalCase("got_ocr2", "got_ocr2", {  # SAM-style tower, two stride-2 convolutions: 64 px / 8 px patches -> 4 tokens a page
        "text_config": {"model_type": "qwen2", **_TEXT},
        "vision_config": {"hidden_size": 32, "output_channels": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
                          "image_size": 64, "patch_size": 8, "window_size": 4, "global_attn_indexes": [1], "mlp_dim": 64},
        "image_token_index": 500}),
    MultimodalCase("idefics2", "idefics2", {  # a perceiver resampler: 8 latents per image
        "text_config": {"model_type": "mistral", **_TEXT},
        "vision_config": {**_VISION, "image_size": 32, "patch_size": 8},
        "perceiver_config": {"hidden_size": 64, "rms_norm_eps": 1e-6, "hidden_act": "silu", "resampler_n_latents": 8, "resampler_depth": 1, "resampler_n_heads": 2,
                             "resampler_head_dim": 16, "num_key_value_heads": 1},
        "image_token_id": 500}),
    MultimodalCase("florence2", "florence2", {  # a captioner of estimator/peak/inputs/prompts/captioners.py: 768 px, 577 image tokens
        "text_config": {"model_type": "bart", "d_model": 64, "encoder_layers": 1, "decoder_layers": 1, "encoder_attention_heads": 4,
                        "decoder_attention_heads": 4, "encoder_ffn_dim": 128, "decoder_ffn_dim": 128, "vocab_size": 512,
                        "max_position_embeddings": 1024, "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2,
                        "decoder_start_token_id": 2, "forced_eos_token_id": 2},
        "vision_config": {"depths": [1, 1, 1, 1], "embed_dim": [16, 16, 32, 32], "num_heads": [1, 1, 2, 2],
                          "num_groups": [1, 1, 2, 2], "projection_dim": 64, "drop_path_rate": 0.0},
        "image_token_id": 500}, seq_len=16),
    MultimodalCase("blip-2", "blip-2", {  # a Q-Former's 8 query tokens per image, one image per prompt (estimator/peak/inputs/prompts/captioners.py)
        "vision_config": {**_VISION, "image_size": 32, "patch_size": 8},
        "qformer_config": {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64,
                           "encoder_hidden_size": 32, "vocab_size": 512},
        "text_config": {"model_type": "opt", "hidden_size": 64, "ffn_dim": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
                        "vocab_size": 512, "max_position_embeddings": 2048, "word_embed_proj_dim": 64},
        "num_query_tokens": 8, "image_token_index": 500}),
    MultimodalCase("instructblip", "instructblip", {  # BLIP-2's layout, the Q-Former also reading the prompt
        "vision_config": {**_VISION, "image_size": 32, "patch_size": 8},
        "qformer_config": {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64,
                           "encoder_hidden_size": 32, "vocab_size": 512},
        "text_config": {"model_type": "opt", "hidden_size": 64, "ffn_dim": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
                        "vocab_size": 512, "max_position_embeddings": 2048, "word_embed_proj_dim": 64},
        "num_query_tokens": 8, "image_token_index": 500}),
    MultimodalCase("idefics", "idefics", {  # a perceiver's latents read by gated cross-attention; the decode keeps image_hidden_states
        "vocab_size": 512, "additional_vocab_size": 0, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "cross_layer_interval": 1, "max_position_embeddings": 2048,
        "vision_config": {"embed_dim": 32, "image_size": 32, "patch_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2,
                          "intermediate_size": 64},
        "perceiver_config": {"use_resampler": True, "resampler_n_latents": 8, "resampler_depth": 1, "resampler_n_heads": 2,
                             "resampler_head_dim": 16}}),
    # Gemma 4: the image processor resizes each image within 280 soft tokens of 3x3 patches (a 224 px image -> 768 px)
    MultimodalCase("gemma4", "gemma4", {
        "text_config": {**_TEXT, "sliding_window": 64, "vocab_size": 600, "hidden_size_per_layer_input": 16,
                        "vocab_size_per_layer_input": 600},
        "vision_config": {**_VISION, "num_key_value_heads": 2, "head_dim": 16, "patch_size": 16},
        "image_token_id": 501, "boi_token_id": 502, "eoi_token_id": 503, "video_token_id": 504, "audio_token_id": 505,
        "boa_token_id": 506, "eoa_token_index": 507}),
    # HunYuan-VL: <im_start><image><im_end>, the image a row of merged patches plus a newline token per row
    MultimodalCase("hunyuan_vl", "hunyuan_vl", {
        "text_config": {**_TEXT, "num_key_value_heads": 4, "rope_parameters": {"mrope_section": [2, 2, 2, 2], "rope_theta": 10000.0,
                                                                               "rope_type": "default"}},
        "vision_config": {**_VISION, "num_key_value_heads": 2, "out_hidden_size": 64, "text_hidden_size": 64, "patch_size": 16,
                          "spatial_merge_size": 2},
        "image_token_id": 501}),
    # Muse-Glimmer: a grid of 14 px patches, 2x2 merged (out_hidden_size: the vision width times 4)
    MultimodalCase("muse_glimmer", "muse_glimmer", {
        "text_config": {**_TEXT, "sliding_window": 64},
        "vision_config": {**_VISION, "num_hidden_layers": 2, "patch_size": 14, "merge_size": 2},
        "out_hidden_size": 128, "projector_hidden_size": 64, "image_token_id": 501, "video_token_id": 502}),
    # Gemma 4 unified: Gemma 4's prompt, the image embedded by patches without a vision transformer
    MultimodalCase("gemma4_unified", "gemma4_unified", {
        "text_config": {**_TEXT, "sliding_window": 64, "vocab_size": 600, "hidden_size_per_layer_input": 16,
                        "vocab_size_per_layer_input": 600},
        "vision_config": {"mm_embed_dim": 64, "output_proj_dims": 64, "patch_size": 16},
        "image_token_id": 501, "boi_token_id": 502, "eoi_token_id": 503, "video_token_id": 504, "audio_token_id": 505,
        "boa_token_id": 506, "eoa_token_index": 507}),
    # MiniCPM-V 4.6 / 4.7, MiniCPM-o OCR: a gated-DeltaNet + attention text model (Qwen3.5's); every image is resized to
    # the processor's 448 px crop (16 px patches: 28x28), the window merger after vision layer 0 and the MLP merger
    # each merge 2x2 ("16x": 49 tokens an image; OCR's "4x" skips the window merger: 196)
    *(MultimodalCase(t, t, {
        "text_config": {"model_type": "qwen3_5_text", **_TEXT, "layer_types": ["linear_attention", "full_attention"],
                        "linear_num_value_heads": 4, "linear_num_key_heads": 2, "linear_key_head_dim": 8,
                        "linear_value_head_dim": 8},
        "vision_config": {**_VISION, "num_hidden_layers": 2, "image_size": 64, "patch_size": 16},
        "insert_layer_id": 0, "image_token_id": 501, "video_token_id": 502,
        **({"image_start_id": 503, "image_end_id": 504, "slice_start_id": 505, "slice_end_id": 506, "newline_id": 507}
           if t == "minicpmv4_7" else {})}) for t in ("minicpmv4_6", "minicpmv4_7", "minicpm_ocr")),
    # Nemotron-3-Nano-Omni: a RADIO tower on at least 1024 patches of 16 px (the image processor's floor), pixel-shuffled
    # 2x2 into 256 <image> tokens between <img> and </img>; a hybrid Mamba / attention / MoE language model
    MultimodalCase("nemotron_h_omni", "nemotron_h_omni", {
        "text_config": {"vocab_size": 512, "hidden_size": 64, "layers_block_type": ["linear_attention", "full_attention", "moe"],
                        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128,
                        "ssm_state_size": 16, "mamba_num_heads": 4, "mamba_head_dim": 16, "n_groups": 1, "chunk_size": 64,
                        "n_routed_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
                        "moe_shared_expert_intermediate_size": 32, "max_position_embeddings": 2048},
        "vision_config": {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "patch_size": 16, "image_size": 64,
                          "video_temporal_patch_size": 2},
        "vision_hidden_size": 32, "projector_hidden_size": 64, "image_token_id": 500}, seq_len=8, image_size=64),
    # Unlimited-OCR: a SAM stage (128 px global view, 16 px patches, two stride-2 convolutions: 2x2 queries) feeding a
    # CLIP as wide as its last map; each query row + a newline, then the view separator: 7 <image> tokens; an MoE text model
    MultimodalCase("unlimited_ocr", "unlimited_ocr", {
        "text_config": {**_TEXT, "num_key_value_heads": 4, "n_routed_experts": 4, "num_experts_per_tok": 2,
                        "moe_intermediate_size": 32, "n_shared_experts": 1, "sliding_window": 64},
        "vision_config": {"sam_config": {"hidden_size": 32, "output_channels": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
                                         "image_size": 128, "patch_size": 16, "window_size": 4, "global_attn_indexes": [1],
                                         "mlp_dim": 64, "downsample_channels": [32, 32]},
                          "encoder_config": {**_VISION, "image_size": 28, "patch_size": 14}},
        "image_token_id": 500}),
    # GLM-5-Next: GLM-4V's grid prompt; an MoE text model with MLA and a k-pool sparse-attention indexer (NoPE)
    MultimodalCase("glm5_next", "glm5_next", {
        "text_config": {"vocab_size": 512, "hidden_size": 64, "intermediate_size": 128, "moe_intermediate_size": 32,
                        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4, "n_routed_experts": 4,
                        "num_experts_per_tok": 2, "kv_lora_rank": 32, "q_lora_rank": 32, "qk_rope_head_dim": 0,
                        "qk_nope_head_dim": 16, "v_head_dim": 16, "index_topk": 16, "index_head_dim": 16, "index_n_heads": 2,
                        "index_kpool": 16, "linear_head_dim": 16, "linear_num_heads": 4, "mlp_layer_types": ["dense", "sparse"],
                        "layer_types": ["linear_attention", "indexed_attention"], "indexer_types": ["full", "full"],
                        "pad_token_id": 0},
        "vision_config": {"depth": 1, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "patch_size": 14,
                          "image_size": 56, "spatial_merge_size": 2, "temporal_patch_size": 2, "out_hidden_size": 64},
        "image_token_id": 500, "video_token_id": 501, "image_start_token_id": 502, "image_end_token_id": 503,
        "video_start_token_id": 504, "video_end_token_id": 505}, image_size=56),
    # GLM-Image: the source image's VQ codes (0..255) written into input_ids, the special ids above them as its
    # checkpoints have them (start 256, end 257 = eos); its generate makes target-grid tokens
    MultimodalCase("glm_image", "glm_image", {
        "text_config": {**_TEXT, "vision_vocab_size": 512, "rope_parameters": {"rope_type": "default", "mrope_section": [2, 3, 3],
                                                                               "rope_theta": 10000.0},
                        "pad_token_id": 0, "eos_token_id": 257},
        "vision_config": {"depth": 1, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "patch_size": 16,
                          "image_size": 64, "spatial_merge_size": 1},
        "vq_config": {"embed_dim": 32, "num_embeddings": 256, "latent_channels": 32},
        "image_token_id": 500, "image_start_token_id": 256, "image_end_token_id": 257},
        cls="GlmImageForConditionalGeneration", image_size=64),
    # Evolla: a SaProt protein encoder (ESM, rotary), a perceiver resampler to 8 latents, cross-attention adapters after
    # each text layer; fed a protein and text by EvollaProcessor (estimator/peak/inputs/other/protein.py). The "images" slot
    # of the bench carries the protein's residues, which is also the seq_len (the text's words), as the estimator feeds it
    MultimodalCase("evolla", "evolla", {
        **{k: v for k, v in _TEXT.items() if k != "head_dim"}, "aligner_num_add_layers": 2, "resampler_depth": 2,
        "resampler_dim_head": 16, "resampler_heads": 2, "resampler_num_latents": 8, "resampler_ff_mult": 2,
        "bos_token_id": 1, "eos_token_id": 2, "use_cache": True,  # generate with the KV cache, as the estimator simulates it
        "protein_encoder_config": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                                   "num_attention_heads": 4}},
        cls="EvollaForProteinText2Text", extra={"protein": True}),
    MultimodalCase("whisper", "whisper", {
        "d_model": 64, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 4, "decoder_attention_heads": 4,
        "encoder_ffn_dim": 128, "decoder_ffn_dim": 128, "num_mel_bins": 16, "vocab_size": 512, "max_target_positions": 64,
        "decoder_start_token_id": 1, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2, "suppress_tokens": [],
        "begin_suppress_tokens": []}, cls="WhisperForConditionalGeneration", seq_len=16),
    MultimodalCase("speech_to_text", "speech_to_text", {
        "d_model": 64, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 4, "decoder_attention_heads": 4,
        "encoder_ffn_dim": 128, "decoder_ffn_dim": 128, "input_feat_per_channel": 16, "conv_channels": 32, "vocab_size": 512,
        "max_source_positions": 2048, "max_target_positions": 64, "decoder_start_token_id": 1, "pad_token_id": 0,
        "bos_token_id": 1, "eos_token_id": 2}, cls="Speech2TextForConditionalGeneration", seq_len=16),
]}
# Unlimited-OCR at its processor's default 1024 px, over its 640 px tile: each image also cut into 2x2 local tiles of
# 640 px (10x10 queries each: 20 rows of 20 + a newline, 420 <image> tokens) before its 128 px global view's 7
MM_CASES["unlimited_ocr_tiles"] = replace(MM_CASES["unlimited_ocr"], name="unlimited_ocr_tiles", image_size=1024)
