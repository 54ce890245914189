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
)

LABELS: dict[str, str] = {
    "model": "Model id or Hub URL",
    "revision": "Revision",
    "library": "Library",
    "dtypes": "dtypes",
    "mode": "Mode",
    "batch": "Batch size",
    "seq": "Sequence length (0 = default)",
    "image": "Image size (0 = from the config)",
    "new_tokens": "New tokens (inference)",
    "device": "Target device",
    "optimizer": "Optimizer (training)",
    "pure16": "Pure 16-bit (training)",
    "checkpointing": "Gradient checkpointing (training)",
    "lora": "LoRA rank (0 = full fine-tuning)",
    "lora_targets": "LoRA targets (comma-separated module names; empty = peft's defaults)",
    "gpu": "Your GPU (listed first in 'fits on')",
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
    "token": "token",
}


def short_label(field: str) -> str:
    """The label without its parenthesised hint: ``"Sequence length"``."""
    return LABELS[field].split(" (", 1)[0]
