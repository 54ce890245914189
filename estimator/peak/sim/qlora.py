"""QLoRA's base model for the simulation: a bitsandbytes int4 (``load_in_4bit``) model on fake tensors.

A real QLoRA run loads the model with ``from_pretrained(..., quantization_config=BitsAndBytesConfig(
load_in_4bit=True, ...))``: transformers' bitsandbytes quantizer swaps the Linear layers it does not
skip for ``bnb.nn.Linear4bit`` on the meta device, then quantizes each weight as it is loaded into a
``Params4bit`` (packed uint8, two 4-bit values a byte) with a ``QuantState`` (float32 ``absmax`` per
block of 64 values, the 16-entry float32 code table). Here the same happens in two steps around
:func:`~estimator.peak.sim.materialize.materialize`:

1. :func:`quantize_on_meta` (before ``prepare``, which calls ``peft.prepare_model_for_kbit_training``
   and ``get_peft_model``: both must see ``Linear4bit`` layers and ``model.is_loaded_in_4bit``):
   transformers' own ``Bnb4BitHfQuantizer.preprocess_model`` / ``postprocess_model`` — the same skip
   list (``get_modules_to_not_convert``) and the same ``replace_with_bnb_linear`` swap as
   ``from_pretrained``; :func:`estimator.quant.bnb.bnb_targets` picks the same layers.
2. :func:`pack_weights` (after ``materialize``): each ``Linear4bit`` weight becomes a fake uint8 tensor of ``(numel + 1) // 2`` bytes with a ``QuantState`` of fake tensors
   (``absmax``, and the code table bitsandbytes builds for real, turned into a fake with
   ``fake_mode.from_tensor``). ``absmax`` and ``code`` are not parameters or buffers of the layer in
   bitsandbytes; they are registered here as non-persistent buffers so that the simulation counts them
   with the weights, as the real run holds them.

On CPU, ``Linear4bit.forward`` (``bnb.matmul_4bit`` -> ``MatMul4Bit``) calls the custom op
``bitsandbytes::gemm_4bit``, whose CPU kernel is bitsandbytes' default one written with torch ops:
``dequantize_4bit`` (a compute-dtype copy of the whole weight) then ``F.linear``. Its fake
registration only makes the output, so :func:`pack_weights` runs each layer's forward under a small
dispatch mode that replaces the op by that Python kernel: the dequantized weight is then tracked as
the temporary it is. Backward (``grad_A = grad_output @ dequantize_4bit(B)``) already runs as torch
ops and needs nothing.

On ``device="cuda"`` (bitsandbytes 0.50's CUDA path, from its source; no GPU here to measure it) the same op
allocates as ``backends/cuda/ops.py`` does (:class:`_CudaGemm4bit`): only the output for up to 4 rows (the fused
``cgemm_4bit``), the whole weight dequantized to the compute dtype beside it above 1,536 rows
(``_dequant_linear_fallback``; between the two bitsandbytes picks by GPU and the dequantizing path is assumed,
with a note). The backward's ``dequantize_4bit`` allocates only its output on CUDA, as its fake
registration does. ``tests/test_qlora_cuda.py`` pins these figures to the installed source.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode

from estimator.peak.workload import model_dtype

__all__ = ["CUDA_DEQUANT_ABOVE_M", "CUDA_FUSED_MAX_M", "QLORA_CUDA", "QUANT_TYPE", "pack_weights", "quantize_on_meta"]

QUANT_TYPE = "nf4"
BLOCKSIZE = 64  # Params4bit's default
CUDA_FUSED_MAX_M = 4  # bitsandbytes 0.50 backends/cuda/ops.py: _GEMM_4BIT_CUSTOM_FLOOR_M (fused kernel at M <= 4)
CUDA_DEQUANT_ABOVE_M = 1536  # ... _gemm_4bit_custom_max_m (dequantize + F.linear above it)
QLORA_CUDA = ("QLoRA on CUDA (bitsandbytes 0.50, autograd/_functions.py MatMul4Bit, backends/cuda/ops.py): each 4-bit "
              "layer's forward is gemm_4bit, which above 1,536 rows (batch x tokens) dequantizes the whole weight to the "
              "compute dtype then F.linear (up to 4 rows the fused kernel writes the output only; between, bitsandbytes "
              "picks by GPU and shape and the dequantizing path, the larger, is assumed); its backward dequantizes the "
              "weight again (dequantize_4bit, in the dtype it was quantized from, cast to the gradient's) for grad_input")




def _config(compute_dtype: torch.dtype, quant_type: str) -> Any:
    from transformers import BitsAndBytesConfig

    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_compute_dtype=compute_dtype, bnb_4bit_quant_type=quant_type)


def quantize_on_meta(model: nn.Module, *, compute_dtype: torch.dtype = torch.bfloat16,
                     quant_type: str = QUANT_TYPE) -> nn.Module:
    """Swap ``model``'s Linear layers for ``bnb.nn.Linear4bit`` (still on meta), as ``from_pretrained``
    with ``load_in_4bit=True`` does, and mark the model as transformers marks a loaded 4-bit model."""
    import bitsandbytes as bnb
    from transformers.quantizers.quantizer_bnb_4bit import Bnb4BitHfQuantizer

    load_dtype = model_dtype(model)
    quantizer = Bnb4BitHfQuantizer(_config(compute_dtype, quant_type))
    quantizer.preprocess_model(model, device_map=None)  # type: ignore[arg-type]  # a PreTrainedModel; is_quantized, quantization_method, the swap
    for module in model.modules():
        if isinstance(module, bnb.nn.Linear4bit):  # the dtype its weight is quantized from (QuantState.dtype)
            module._load_dtype = load_dtype  # type: ignore[assignment]
    model.hf_quantizer = quantizer  # type: ignore[assignment]  # what from_pretrained sets
    quantizer.postprocess_model(model)  # type: ignore[arg-type]  # config.quantization_config, is_loaded_in_4bit
    return model


class _CpuGemm4bit(TorchDispatchMode):
    """Runs ``bitsandbytes::gemm_4bit`` as its CPU kernel does (dequantize, then ``F.linear``), so
    that the modes below (the storage tracker, the fake mode) see its temporaries."""

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func is torch.ops.bitsandbytes.gemm_4bit.default:
            from bitsandbytes.backends.default.ops import _gemm_4bit_default_impl

            return _gemm_4bit_default_impl(*args, **(kwargs or {}))
        return func(*args, **(kwargs or {}))


class _CudaGemm4bit(TorchDispatchMode):
    """``bitsandbytes::gemm_4bit`` as its CUDA kernel allocates (``backends/cuda/ops.py``): above
    :data:`CUDA_FUSED_MAX_M` rows (or with ``K`` not a multiple of the block) ``_dequant_linear_fallback``'s
    ``B_dq``, the whole weight in the compute dtype, lives while the product is made, then is freed; the op itself
    still reaches the modes below (its fake registration makes the output, the speed trace counts it as one op)."""

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func is torch.ops.bitsandbytes.gemm_4bit.default:
            A, shape, blocksize = args[0], args[2], args[4]
            rows = A.numel() // A.shape[-1]
            if rows > CUDA_FUSED_MAX_M or A.shape[-1] % blocksize:
                dequantized = torch.empty(tuple(shape), dtype=A.dtype, device=A.device)
                out = func(*args, **kwargs)
                del dequantized
                return out
        return func(*args, **kwargs)


def _forward_as_on_cpu(forward: Any, *args: Any, **kwargs: Any) -> Any:
    with _CpuGemm4bit():
        return forward(*args, **kwargs)


def _forward_as_on_cuda(forward: Any, *args: Any, **kwargs: Any) -> Any:
    with _CudaGemm4bit():
        return forward(*args, **kwargs)


def pack_weights(model: nn.Module, fake_mode: FakeTensorMode, *, device: str | None = "cpu") -> nn.Module:
    """Give every ``Linear4bit`` of a materialised model its packed 4-bit weight and ``QuantState``
    as fake tensors (see the module docstring); its forward runs ``gemm_4bit`` as ``device``'s kernel
    allocates (``"cpu"``: its torch ops; ``"cuda"``: the dequantized weight where the CUDA kernel makes
    one); ``None``: the storage only (the caller runs the kernels). Returns the model, changed in place."""
    import bitsandbytes as bnb
    from bitsandbytes.functional import QuantState, get_4bit_type

    for module in model.modules():
        if not isinstance(module, bnb.nn.Linear4bit):
            continue
        old = module.weight
        quant_type = getattr(old, "quant_type", QUANT_TYPE)
        shape = torch.Size((module.out_features, module.in_features))
        numel = shape.numel()
        with fake_mode:
            packed = torch.empty(((numel + 1) // 2, 1), dtype=torch.uint8)
            absmax = torch.empty((-(-numel // BLOCKSIZE),), dtype=torch.float32)
        code = fake_mode.from_tensor(get_4bit_type(quant_type, device="cpu"))
        state = QuantState(absmax=absmax, shape=shape, code=code, blocksize=BLOCKSIZE, quant_type=quant_type,
                           dtype=getattr(module, "_load_dtype", torch.bfloat16))
        # A Params4bit cannot wrap a fake tensor (Tensor._make_subclass refuses a FakeTensor): the weight is a
        # fake Parameter carrying Params4bit's attributes, which is all bitsandbytes' and peft's code reads.
        weight = nn.Parameter(packed, requires_grad=False)
        for name, value in {"quant_state": state, "blocksize": BLOCKSIZE, "compress_statistics": False,
                            "quant_type": quant_type, "quant_storage": torch.uint8, "bnb_quantized": True,
                            "module": module}.items():
            setattr(weight, name, value)
        module.weight = weight
        module.register_buffer("_quant_absmax", absmax, persistent=False)
        module.register_buffer("_quant_code", code, persistent=False)
        if device in ("cpu", "cuda"):
            on_device = _forward_as_on_cpu if device == "cpu" else _forward_as_on_cuda
            module.forward = functools.partial(on_device, module.forward)  # type: ignore[method-assign]
    return model
