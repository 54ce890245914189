"""Quantized rows built with the libraries' own layer swaps, on the meta device.

float8: transformers' fine-grained FP8 quantization (``FineGrainedFP8Config``, the default
128x128 weight blocks), applied by its own quantizer to a bfloat16 meta build: every ``nn.Linear``
(and fused MoE expert block) outside the skip list becomes ``FP8Linear`` with an
``float8_e4m3fn`` weight and a float32 ``weight_scale_inv`` per 128x128 block. The skip list is
transformers' default (the output head and modules tied to the input embedding, plus the model's
``_keep_in_fp32_modules``); embeddings, norms and everything that is not a Linear layer stay in
bfloat16.
"""

from __future__ import annotations

from torch import nn


def to_fp8(model: nn.Module) -> tuple[nn.Module, tuple[str, ...]]:
    """Swap ``model``'s Linear layers in place the way ``from_pretrained(quantization_config=FineGrainedFP8Config())`` does.

    Returns the model and the names of the modules transformers keeps in 16 bits.
    """
    from transformers import FineGrainedFP8Config
    from transformers.quantizers.quantizer_finegrained_fp8 import FineGrainedFP8HfQuantizer

    quantizer = FineGrainedFP8HfQuantizer(FineGrainedFP8Config())
    quantizer._process_model_before_weight_loading(model)  # type: ignore[arg-type]  # any transformers model
    skipped = tuple(sorted(quantizer.modules_to_not_convert or ()))
    return model, skipped
