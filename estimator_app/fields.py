"""The form's fields, defined once: their order, their labels, and the core option each one sets.

The order is the share link's (``CONTRACT.md``, "Share links"): the page builds its widgets in
this order, :func:`estimator_app.form.from_form` reads their values in it, and
:func:`estimator_app.form.to_fields` writes a link's values back in it.
"""

from __future__ import annotations

FIELDS: tuple[str, ...] = (
    "model",
    "revision",
    "library",
    "dtypes",
    "mode",
    "batch",
    "seq",
    "image",
    "new_tokens",
    "device",
    "optimizer",
    "pure16",
    "checkpointing",
    "lora",
    "lora_targets",
    "gpu",
    "gpu_memory",
    "ctx",
    "cache_type",
    "n_gpu_layers",
    "gguf_file",
    "gpu_memory_utilization",
    "max_model_len",
    "max_num_seqs",
    "max_num_batched_tokens",
    "kv_cache_dtype",
    "block_size",
    "gpus",
    "nodes",
    "strategy",
    "offload",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "quantization",
    "vllm_version",
    "images",
    "audio",
    "video",
    "attn",
)

LABELS: dict[str, str] = {
    "model": "Model id or Hub URL",
    "revision": "Revision",
    "library": "Library",
    "dtypes": "dtypes",
    "mode": "What to do",
    "batch": "Batch size",
    "seq": "Context length (tokens per sequence; run and fine-tune; 0 = 512)",
    "image": "Image size (0 = from the config)",
    "new_tokens": "New tokens (inference)",
    "device": "Target device",
    "optimizer": "Optimizer (training)",
    "pure16": "Pure 16-bit (training)",
    "checkpointing": "Gradient checkpointing (training)",
    "lora": "LoRA rank (0 = full fine-tuning; with int4: QLoRA)",
    "lora_targets": "LoRA targets (needs a LoRA rank; comma-separated module names, empty = peft's defaults)",
    "gpu": "Your GPU (listed first in 'fits on'; run and fine-tune: also the largest batch and context that fit, and how many GPUs)",
    "gpu_memory": "Or your GPU's memory (e.g. 24GiB or 80GB; instead of a listed GPU)",
    "ctx": "Context length (GGUF files; 0 = the file's training context)",
    "cache_type": "KV cache type (GGUF files, llama.cpp's -ctk/-ctv)",
    "n_gpu_layers": "GPU layers (GGUF files; auto = as many as fit your GPU, all, or a number)",
    "gguf_file": "GGUF file or quantization (e.g. Q4_K_M; empty = every file of the repo)",
    "gpu_memory_utilization": "GPU memory utilization (serving, vLLM's; 0.9)",
    "max_model_len": "Max model length (serving; 0 = the model's)",
    "max_num_seqs": "Max sequences per step (serving; 0 = vLLM's default)",
    "max_num_batched_tokens": "Max batched tokens per step (serving; 0 = vLLM's default)",
    "kv_cache_dtype": "KV cache dtype (serving)",
    "block_size": "KV block size in tokens (serving)",
    "gpus": "GPUs per node (fine-tuning with a strategy; figures are per GPU)",
    "nodes": "Nodes",
    "strategy": "Strategy (fine-tuning on several GPUs: ddp, zero1-3, fsdp)",
    "offload": "ZeRO offload to CPU memory",
    "tensor_parallel_size": "Tensor parallel size (run and serve: GPUs the model is split over; figures per GPU)",
    "pipeline_parallel_size": "Pipeline parallel size (serving, vLLM's; the stage with the fewest blocks sizes the cache)",
    "quantization": "Quantize while loading (serving, vLLM's --quantization; a checkpoint's own is read from it)",
    "vllm_version": "vLLM version (serving; whose start-up accounting to follow)",
    "images": "Images per prompt (vision-language models; 0 = the default, 1)",
    "audio": "Audio seconds (speech models; 0 = the feature extractor's window, Whisper's 30)",
    "video": "Video frames (one video per prompt, video-language models; 0 = no video)",
    "attn": "Attention kernel (inference and training; auto = transformers' default for the model)",
    "token": "Hub token for gated or private models (optional; never stored)",
    "post_token": "Your Hub token (write-discussions)",
}

# The keyword of :func:`estimator.estimate` each field sets (the token field sets ``token``).
OPTIONS: dict[str, str] = {
    "revision": "revision",
    "library": "library",
    "dtypes": "dtypes",
    "mode": "mode",
    "batch_size": "batch",
    "seq_len": "seq",
    "image_size": "image",
    "max_new_tokens": "new_tokens",
    "device": "device",
    "optimizer": "optimizer",
    "pure_16bit": "pure16",
    "gradient_checkpointing": "checkpointing",
    "lora_rank": "lora",
    "lora_targets": "lora_targets",
    "gpu": "gpu",
    "gpu_memory": "gpu_memory",
    "ctx": "ctx",
    "cache_type": "cache_type",
    "n_gpu_layers": "n_gpu_layers",
    "gguf_file": "gguf_file",
    "gpu_memory_utilization": "gpu_memory_utilization",
    "max_model_len": "max_model_len",
    "max_num_seqs": "max_num_seqs",
    "max_num_batched_tokens": "max_num_batched_tokens",
    "kv_cache_dtype": "kv_cache_dtype",
    "block_size": "block_size",
    "gpus": "gpus",
    "nodes": "nodes",
    "strategy": "strategy",
    "offload": "offload",
    "tensor_parallel_size": "tensor_parallel_size",
    "pipeline_parallel_size": "pipeline_parallel_size",
    "quantization": "quantization",
    "vllm_version": "vllm_version",
    "images": "images",
    "audio_seconds": "audio",
    "video_frames": "video",
    "attn_implementation": "attn",
    "token": "token",
}


MODE_CHOICES: tuple[tuple[str, str], ...] = (
    ("Load (weights)", "load"),
    ("Run (inference)", "inference"),
    ("Fine-tune (training)", "training"),
    ("Serve (vLLM)", "serving"),
)  # the "What to do" radio: words shown, the mode sent (the link's ``mode`` value)


def params_markdown() -> str:
    """The share link's parameters as docs/app.md lists them (tests/test_app_form.py checks the doc against it)."""
    return f"A link made by the app spells out all {len(FIELDS)} parameters, in this order: " + ", ".join(f"`{f}`" for f in FIELDS) + "."


def short_label(field: str) -> str:
    """The label without its parenthesised hint: ``"Sequence length"``."""
    return LABELS[field].split(" (", 1)[0]
