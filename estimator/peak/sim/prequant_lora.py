"""Training (LoRA or full) of pre-quantized checkpoints (``quantization_config`` in config.json): what a user's
script loads and trains with transformers 5.23 and peft 0.21, scheme by scheme, and how the row is simulated.

What the libraries do (read in their installed source, and run for real on CPU: ``testkit/prequant_lora_truth.py``):

- ``compressed-tensors``: loaded as stored (``dequantize=False``, the default), a ``pack-quantized`` layer
  (W4A16 / W8A16) has no ``weight`` (only ``weight_packed``, ``weight_scale``, ``weight_shape``), and
  ``peft.get_peft_model`` fails on it (``tuners_utils._get_in_out_features`` reads ``module.weight``:
  AttributeError); peft has no compressed-tensors LoRA layer. transformers' ``CompressedTensorsConfig`` documents
  ``dequantize=True`` as "what fine-tuning ... needs": every weight is decompressed to the load dtype while loading
  (``CompressedTensorsDequantize``), the quantization config removed, and the model is the plain one. That load is
  what is simulated, for every compressed-tensors format (a ``naive-quantized`` FP8 one also trains after a
  default load, decompressed at its first forward; the steady step is then the same model).
- ``fp8`` (fine-grained block FP8, DeepSeek-V3/R1's): on ``cpu`` transformers dequantizes it while loading (no
  GPU: ``FineGrainedFP8HfQuantizer.validate_environment`` sets ``dequantize=True``), so the plain model trains. On
  ``cuda`` the ``FP8Linear`` layers keep their float8 weights (``is_trainable`` is True) and peft wraps them as
  any ``nn.Linear`` (``dispatch_default``; ``FP8Linear`` subclasses it): the forward is the finegrained-fp8 kernel
  (modelled as for inference, :mod:`estimator.peak.sim.prequant`), the backward transformers' own
  ``FP8LinearFunction.backward`` (``integrations/finegrained_fp8.py``: the weight dequantized to the gradient's
  dtype, ``_dequantize_fp8_weight``, then ``grad_output @ weight``), torch code that runs on the fakes as is.
- ``mxfp4`` (gpt-oss): ``Mxfp4HfQuantizer.is_trainable`` is False and its warning says to load with
  ``Mxfp4Config(dequantize=True)``; on ``cpu`` the experts are dequantized at load anyway. Either way the model
  trained is the plain one in the load dtype.
- ``gptq`` / ``awq``: peft trains them through its GPTQ / AWQ LoRA layers over gptqmodel's quantized linears
  (``peft/tuners/lora/gptq.py``, ``awq.py``), whose kernels are not modelled for training here: the row says so.
- Other methods whose layers are not simulated: the row says so (``fbgemm_fp8``: transformers refuses to train it,
  ``FbgemmFp8HfQuantizer.is_trainable`` False).

``peft.prepare_model_for_kbit_training`` is not part of these recipes: it is written for bitsandbytes, GPTQ,
AQLM, EETQ, HQQ and torchao models, and on any other model it casts every 16-bit parameter to float32 (the whole
dequantized base, twice its size); the LoRA is ``get_peft_model`` on the model as loaded, as peft's LoRA guide
writes it for an unquantized model.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from estimator.peak.sim.prequant import Scheme, ct_formats, ct_weights, scheme_of
from estimator.peak.sim.training import Recipe

__all__ = ["as_stored", "held_label", "note", "refusal", "training_recipe"]

# quant_method -> why transformers or peft will not train it (the quantizer's is_trainable is False)
_REFUSED = {
    "fbgemm_fp8": "transformers refuses to train an fbgemm_fp8 model (FbgemmFp8HfQuantizer.is_trainable is False)",
}


def as_stored(quantization_config: dict[str, Any], device: str) -> bool:
    """Whether the trained model keeps the checkpoint's quantized layers (fine-grained FP8 on CUDA), rather than
    the plain model its weights are dequantized into at load."""
    return scheme_of(quantization_config) is Scheme.FP8 and device != "cpu"


def refusal(quantization_config: dict[str, Any], dtype: str, device: str, *, lora: bool = True) -> str | None:
    """Why a training row of this pre-quantized checkpoint has no peak (one line), else None. ``lora``: the row
    trains LoRA adapters (else every weight: the dequantized model can be, a model kept quantized cannot)."""
    method = str(quantization_config.get("quant_method") or "unknown")
    scheme = scheme_of(quantization_config)
    if as_stored(quantization_config, device) and not lora:
        return (f"{dtype}: transformers refuses to fine-tune a purely quantized model (its fp8 weights as stored); "
                "a LoRA rank (--lora-rank) trains adapters on it; peak_bytes is null")
    if scheme in (Scheme.COMPRESSED_TENSORS, Scheme.FP8, Scheme.MXFP4):
        return None
    if method in _REFUSED:
        return f"{dtype}: {_REFUSED[method]}; peak_bytes is null"
    if method in (Scheme.GPTQ.value, Scheme.AWQ.value):
        return (f"{dtype}: LoRA training of a pre-quantized {method} checkpoint runs peft's {method.upper()} LoRA layer "
                "over gptqmodel's quantized linears, whose training kernels are not modelled; peak_bytes is null "
                "(its inference is: --mode inference --device cuda)")
    return (f"{dtype}: training of a pre-quantized {method} checkpoint is not simulated (its quantized layers are not "
            "modelled for training); peak_bytes is null")


def training_recipe(quantization_config: dict[str, Any], device: str, recipe: Recipe) -> Recipe:
    """The row's training recipe for this checkpoint: ``recipe`` (the plain model's, :func:`estimator.peak.rows.recipe_for`)
    as is where the weights are dequantized at load; with the checkpoint's layers (``Recipe.prequantized``) where
    they are trained as stored."""
    if as_stored(quantization_config, device):
        return replace(recipe, prequantized=json.dumps(quantization_config, sort_keys=True))
    return recipe


def _load_call(scheme: Scheme | None) -> str:
    if scheme is Scheme.COMPRESSED_TENSORS:
        return "from_pretrained(..., quantization_config=CompressedTensorsConfig(dequantize=True))"
    if scheme is Scheme.MXFP4:
        return "from_pretrained(..., quantization_config=Mxfp4Config(dequantize=True))"
    return "from_pretrained on a machine without a GPU (transformers dequantizes fp8 there)"


def held_label(quantization_config: dict[str, Any], device: str, load_dtype: str) -> str:
    """The training row's ``weights_held``: the scheme, and how the trained model holds it."""
    scheme = scheme_of(quantization_config)
    if as_stored(quantization_config, device):
        block = quantization_config.get("weight_block_size") or [128, 128]
        return (f"fp8 blocks {block[0]}x{block[1]} as stored (frozen); finegrained-fp8 kernel (modelled), "
                "backward through the dequantized weight")
    if scheme is Scheme.COMPRESSED_TENSORS:
        what = f"compressed-tensors {'/'.join(sorted(ct_formats(quantization_config)))} {ct_weights(quantization_config)}"
        return f"{what}, dequantized to {load_dtype} at load (CompressedTensorsConfig(dequantize=True)) for training"
    if scheme is Scheme.MXFP4:
        return f"mxfp4 experts, dequantized to {load_dtype} at load (Mxfp4Config(dequantize=True)) for training"
    block = quantization_config.get("weight_block_size") or [128, 128]
    return f"fp8 blocks {block[0]}x{block[1]}, dequantized to {load_dtype} at load (CPU) for training"


def note(quantization_config: dict[str, Any], device: str, load_dtype: str) -> str:
    """The training row's note: what a user's script loads and how the simulation runs it."""
    scheme = scheme_of(quantization_config)
    if as_stored(quantization_config, device):
        return ("pre-quantized fp8 checkpoint trained as stored: the FP8Linear layers keep their float8 weights and "
                "scales, frozen, and peft wraps them as nn.Linear (LoRA adapters beside them); each forward is the "
                "finegrained-fp8 kernel, modelled from its source as for inference, and each backward transformers' "
                "FP8LinearFunction.backward (integrations/finegrained_fp8.py: the weight dequantized to the gradient's "
                "dtype, then grad_output @ weight), run as is; not measured (no GPU here)")
    why = {
        Scheme.COMPRESSED_TENSORS: "peft cannot wrap compressed-tensors' packed layers (no weight: get_peft_model "
                                   "fails), and transformers documents dequantize=True as the way to fine-tune",
        Scheme.MXFP4: "Mxfp4HfQuantizer.is_trainable is False: transformers asks for dequantize=True to train",
    }.get(scheme, "no GPU: FineGrainedFP8HfQuantizer sets dequantize=True")  # type: ignore[arg-type]
    return (f"pre-quantized {scheme.value if scheme else 'quantized'} checkpoint, training: loaded with "
            f"{_load_call(scheme)} ({why}), so the weights are dequantized to {load_dtype} while loading and the "
            "plain model is trained (LoRA: peft.get_peft_model on it, without prepare_model_for_kbit_training, which "
            "would cast the 16-bit base to float32); the load's own dequantization temporaries are outside this peak")
