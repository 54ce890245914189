"""PI0 (a vision-language-action model): its processor's inputs, ``sample_actions`` for inference, the flow-matching loss for training.

A PI0 prompt is what :class:`~transformers.PI0Processor` makes of one camera image per ``--images`` (1 by default)
and the instruction: ``image_seq_length`` ``<image>`` tokens per camera (the vision tower's patches, as the
PaliGemma backbone's), the BOS token, the text and a newline, padded to the processor's ``max_length`` (48);
``pixel_values`` (B, cameras, 3, S, S) from :class:`~transformers.PI0ImageProcessor` at the tower's image size,
``pixel_attention_mask`` (B, cameras) and the padding ``attention_mask``. The robot ``state`` (B,
``max_state_dim``) and, for training, the ``actions`` (B, ``chunk_size``, ``max_action_dim``) have the shapes
the processor pads them to (their values, normalised by the checkpoint's dataset statistics, do not change
the memory).

- **Inference** is the model's own ``sample_actions``: the VLM prefix runs once into a cache, then
  ``num_inference_steps`` denoising forwards of the action expert over it (each cropped back to the prefix).
- **Training** is the forward with ``actions``: its mean-squared flow-matching loss.

The tokenizer is the stand-in of :mod:`estimator.peak.inputs.prompts.family` (the config's BOS and image token ids, every
other word one token); nothing runs a repository's code.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from estimator.peak.fakes.known_values import known_fakes
from estimator.peak.inputs.prompts.family import Family, family_tokenizer
from estimator.peak.inputs.vision.pair import pair_context
from estimator.peak.workload import ModelKind, Workload, model_dtype

__all__ = ["workload"]


def workload(model: nn.Module, *, batch_size: int, seq_len: int, image_size: int | None, images: int = 1) -> Workload | None:
    """PI0's workload (see the module docstring); None for other models."""
    config: Any = getattr(model, "config", None)
    if getattr(config, "model_type", None) != "pi0" or not hasattr(model, "sample_actions"):
        return None
    real = _processed(config, batch_size, seq_len, image_size, images)
    dtype = model_dtype(model)

    def make_inputs() -> dict[str, torch.Tensor]:
        return known_fakes(real, dtype)

    def train_loss(m: nn.Module, x: dict[str, torch.Tensor]) -> torch.Tensor:
        return m(**x).loss

    def infer(m: nn.Module, x: dict[str, torch.Tensor]) -> Any:
        return m.sample_actions(**{k: v for k, v in x.items() if k != "actions"})  # type: ignore[operator]

    image_tokens = int(real.pop("image_tokens"))
    shapes = ", ".join(f"{k} {'x'.join(map(str, v.shape))}" for k, v in real.items())
    cameras = real["pixel_values"].shape[1]
    words = (f"{cameras} camera image{'s' if cameras != 1 else ''} per prompt, {image_tokens} image tokens + "
             f"{seq_len} text tokens (PI0Processor; {shapes}); inference: sample_actions ({config.num_inference_steps} "
             f"denoising steps over the prefix cache); training: the flow-matching loss on the actions")

    # the action expert's token embedding is never used (it reads the actions' embeddings): no gradient, no optimizer
    # state for it, as the first step run in full shows
    return Workload(ModelKind.MODULE, make_inputs, train_loss, infer, words, context=pair_context, full_first_step=True)


def _processed(config: Any, b: int, seq_len: int, image_size: int | None, images: int) -> dict[str, torch.Tensor]:
    """PI0Processor's output for ``b`` prompts of ``images`` camera images and ``seq_len`` words."""
    from transformers import PI0ImageProcessor, PI0Processor

    vlm = config.vlm_config
    vision = vlm.vision_config
    size = int(image_size or vision.image_size)
    tokens = (size // int(vision.patch_size)) ** 2
    family = Family(tokens={"<image>": ("image_token_id",), "<bos>": ("text_config.bos_token_id", "bos_token_id")},
                    placeholder="", attributes={"bos_token": "<bos>"})
    tokenizer = family_tokenizer(vlm, family)
    image_processor = PI0ImageProcessor(size={"max_height": size, "max_width": size}, pad_size={"height": size, "width": size},
                                        image_seq_length=tokens)
    proc = PI0Processor(image_processor=image_processor, tokenizer=tokenizer, max_state_dim=int(config.max_state_dim),
                        chunk_size=int(config.chunk_size))
    rng = np.random.default_rng(0)
    pictures = [[rng.integers(0, 256, (size, size, 3), dtype=np.uint8) for _ in range(images)] for _ in range(b)]
    out = proc(images=pictures, text=[" ".join(["a"] * seq_len)] * b, return_tensors="pt")
    made = {k: v for k, v in out.items() if isinstance(v, torch.Tensor)}
    made["state"] = torch.zeros(b, int(config.max_state_dim))
    made["actions"] = torch.zeros(b, int(config.chunk_size), int(config.max_action_dim))
    made["image_tokens"] = torch.tensor(int((made["input_ids"][0] == tokenizer.convert_tokens_to_ids("<image>")).sum()))
    return made
