"""How a training step is run: the recipe, and the library calls that set the model up for it.

A :class:`Recipe` says what a real fine-tuning run does besides forward, backward and the
optimizer step: mixed precision (``autocast_dtype``: forward and loss under ``torch.autocast``),
gradient checkpointing, LoRA, QLoRA. :func:`prepare` applies it to a model still on the meta
device with the libraries' own calls, in the order a transformers ``Trainer`` script makes them:

1. QLoRA (``kbit``): ``peft.prepare_model_for_kbit_training`` — every parameter frozen, the
   16-bit ones that are not quantized (norms, embeddings, the head) cast to float32, gradient
   checkpointing on (peft's default).
2. Gradient checkpointing: transformers' ``gradient_checkpointing_enable()`` with its defaults
   (``use_reentrant=False``), timm's ``set_grad_checkpointing()``.
3. LoRA: ``peft.get_peft_model(model, LoraConfig(r=rank, target_modules=targets))`` — peft's
   own default targets for the architecture when none are given, its default dropout (0: no
   dropout module) and ``autocast_adapter_dtype=True`` (adapters in float32) except for a pure
   16-bit step, where the adapters stay in the row's dtype.

The optimizer is built by :func:`make_optimizer` over the parameters that require a gradient.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

__all__ = ["OPTIMIZERS", "OPTIMIZER_NOTES", "LoraTargetsError", "Recipe", "make_optimizer", "prepare"]

OPTIMIZERS = ("adamw", "sgd", "adafactor", "adamw8bit")

# What each optimizer is, as the notes say it.
OPTIMIZER_NOTES = {
    "adamw": "torch.optim.AdamW (for-loop on CPU tensors, foreach on CUDA tensors: the defaults)",
    "sgd": "torch.optim.SGD with torch's defaults (no momentum, so no optimizer state)",
    "adafactor": "transformers' Adafactor as Trainer builds it (scale_parameter=False, relative_step=False): "
                 "factored second moments (a row and a column vector per matrix), no first moment",
    "adamw8bit": "bitsandbytes' AdamW8bit: 8-bit blockwise-quantized moments (block 256, float32 absmax per block); "
                 "tensors under 4,096 elements keep 32-bit states",
}


class LoraTargetsError(ValueError):
    """peft refused the LoRA targets: it has no default ones for this architecture, or those named
    are not in the model. The message is peft's own."""


@dataclass(frozen=True)
class Recipe:
    """What a training step runs besides forward, backward and ``optimizer.step()``."""

    optimizer: str = "adamw"
    autocast_dtype: torch.dtype | None = None  # mixed precision: forward and loss under autocast
    gradient_checkpointing: bool = False
    lora_rank: int | None = None
    lora_targets: tuple[str, ...] | None = None
    kbit: bool = False  # QLoRA: the base is a bitsandbytes-quantized model
    kbit_bits: int = 4  # with kbit: 4 (load_in_4bit, nf4) or 8 (load_in_8bit, LLM.int8()); inference uses it too
    adapters_in_float32: bool = True  # peft's autocast_adapter_dtype (off for a pure 16-bit step)
    # a pre-quantized checkpoint's quantization_config as JSON text (estimator.peak.sim.prequant): its layers, in
    # inference, and in training where they are trained as stored (estimator.peak.sim.prequant_lora)
    prequantized: str | None = None

    def describe(self) -> str:
        parts = []
        if self.kbit:
            swap = ("4-bit swap (nf4, blocks of 64, no double quantization)" if self.kbit_bits == 4 else
                    "8-bit swap (LLM.int8(), threshold 6.0)")
            parts.append(f"{'QLoRA' if self.kbit_bits == 4 else 'LoRA on int8'}: transformers' bitsandbytes {swap}, "
                         "peft.prepare_model_for_kbit_training (base frozen, 16-bit non-quantized parameters to float32)")
        if self.lora_rank is not None:
            targets = ", ".join(self.lora_targets) if self.lora_targets else "peft's default targets"
            parts.append(f"LoRA r={self.lora_rank} on {targets} (peft.get_peft_model; base frozen)")
        if self.kbit:  # peft passes gradient_checkpointing_kwargs={}: torch's reentrant checkpoint
            parts.append("gradient checkpointing as peft enables it (reentrant, every layer, recomputed in backward)")
        elif self.gradient_checkpointing:
            parts.append("gradient checkpointing (non-reentrant, every layer, recomputed in backward)")
        if self.autocast_dtype is not None:
            parts.append(f"mixed precision: forward and loss under torch.autocast({str(self.autocast_dtype).removeprefix('torch.')})")
        parts.append(OPTIMIZER_NOTES[self.optimizer])
        return "; ".join(parts)


def _is_timm(model: nn.Module) -> bool:
    return type(model).__module__.startswith("timm.")


def prepare(model: nn.Module, recipe: Recipe) -> nn.Module:
    """The model set up for ``recipe`` (possibly a ``PeftModel`` wrapping it); see the module docstring."""
    if recipe.kbit:
        from peft import prepare_model_for_kbit_training

        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=True)
    elif recipe.gradient_checkpointing:
        _enable_checkpointing(model)
    if recipe.lora_rank is not None:
        model = _lora(model, recipe)
    return model


def _enable_checkpointing(model: nn.Module) -> None:
    if _is_timm(model):
        model.set_grad_checkpointing(True)  # type: ignore[operator]  # timm models define it
        return
    with warnings.catch_warnings():  # transformers 5 names it activation_checkpointing_enable; same code
        warnings.simplefilter("ignore", FutureWarning)
        model.gradient_checkpointing_enable()  # type: ignore[operator]  # a PreTrainedModel method


def _lora(model: nn.Module, recipe: Recipe) -> nn.Module:
    from peft import LoraConfig, get_peft_model

    assert recipe.lora_rank is not None
    config = LoraConfig(r=recipe.lora_rank, target_modules=list(recipe.lora_targets) if recipe.lora_targets else None)
    try:
        return get_peft_model(model, config, autocast_adapter_dtype=recipe.adapters_in_float32)
    except ValueError as exc:  # peft's refusals of the targets: none by default for this model, or not found
        raise LoraTargetsError(str(exc)) from exc


def make_optimizer(params: Sequence[torch.Tensor], name: str, device: str) -> Any:
    """The optimizer a real run would build: CPU tensors default to the for-loop implementations,
    CUDA tensors to the multi-tensor (``foreach``) ones. Learning rates do not change memory."""
    foreach = device == "cuda"
    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-4, foreach=foreach)
    if name == "sgd":
        return torch.optim.SGD(params, lr=1e-3, foreach=foreach)
    if name == "adafactor":
        from transformers.optimization import Adafactor

        return Adafactor(params, lr=1e-3, scale_parameter=False, relative_step=False)
    if name == "adamw8bit":
        import bitsandbytes as bnb

        return bnb.optim.AdamW8bit(params, lr=1e-4)
    raise ValueError(f"optimizer {name!r} is not simulated; use one of {', '.join(OPTIMIZERS)}")
