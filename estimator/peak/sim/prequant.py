"""Pre-quantized checkpoints (``quantization_config`` in config.json) on fake tensors: inference as transformers
loads and runs them.

The model is built on meta from its config, then transformers' own quantizer for the checkpoint's
``quant_method`` (``AutoHfQuantizer.from_config(..., pre_quantized=True)``) replaces its layers, as
``from_pretrained`` does before it loads the weights (:func:`quantize_on_meta`); the engine then makes every
tensor fake (:func:`~estimator.peak.sim.materialize.materialize`) and :func:`pack` readies what the forward needs.
Schemes, and how each one runs:

- ``compressed-tensors`` (llm-compressor's output: ``pack-quantized`` int4/int8 W4A16 / W8A16, the GPTQ layout;
  ``float-quantized`` / ``naive-quantized`` FP8 and INT8 weights): transformers applies compressed-tensors'
  ``apply_quantization_config`` and ``ModelCompressor.compress_model`` (the packed ``weight_packed`` int32,
  ``weight_scale``, ``weight_shape``), and compress_model registers compressed-tensors' forward pre-hook that
  **decompresses the whole model at its first forward** (``ModelCompressor.add_decompress_hook`` ->
  ``decompress_model``: each layer's weight unpacked and dequantized to the scale's dtype, the packed tensor
  dropped). compressed-tensors' own decompression runs here on the fakes, on ``cpu`` and ``cuda`` alike (it is
  torch code); from then on the layers are plain ``Linear`` in the load dtype. The only help it gets: the
  ``weight_shape`` each layer stores (a two-integer tensor whose values the unpacking reads) is handed to it as
  the shape the checkpoint stores, since fake tensors carry no values.
- ``fp8`` (transformers' FineGrainedFP8Config: block-wise float8_e4m3fn weights with float32 ``weight_scale_inv``
  per ``weight_block_size`` block, as DeepSeek-V3/R1 store them): on ``cpu`` transformers dequantizes the
  checkpoint to the load dtype while loading (``FineGrainedFP8HfQuantizer.validate_environment``: no GPU ->
  ``dequantize=True``), so the model is the plain one in that dtype. On ``cuda`` the ``FP8Linear`` layers keep
  their float8 weights and scales (exact, as stored) and call the finegrained-fp8 kernel (Triton / DeepGEMM,
  CUDA only), which cannot run here: its allocations are modelled from its published source,
  transformers 4.57 ``src/transformers/integrations/finegrained_fp8.py`` (the in-tree version of the kernel
  transformers 5 loads from the Hub's ``kernels-community/finegrained-fp8``): ``FP8Linear.forward`` ->
  ``act_quant`` (a float8 copy of the input, ``M x K`` bytes, and float32 scales, ``M x K/block_k``),
  ``w8a8_block_fp8_matmul_triton`` (the output, ``M x N`` in the input dtype, ``C = A.new_empty``), then
  ``output + bias`` and ``torch.nan_to_num(output)`` (an output-sized copy each); the kernel itself keeps its
  accumulators in registers (no global workspace). MoE experts (``FP8Experts``, DeepSeek's) call the kernel's
  grouped matmul, whose source is not in transformers' tree: it is assumed to make the same float8 input copy,
  scales and output (the note says so).

- ``gptq`` (symmetric, 4 or 8 bits, the ``gptq`` checkpoint format) and ``awq`` (4 or 8 bits, ``gemm``): on
  ``cuda`` the layer gptqmodel selects by default is Marlin, CUDA only, which cannot run on fakes: each quantized
  linear is replaced by a stand-in holding the packed ``qweight`` / ``scales`` (/ AWQ's ``qzeros``) exactly as
  Marlin keeps them after ``post_init``, with its per-layer workspace, and allocating per call what
  ``gptq_marlin_gemm`` allocates (:mod:`estimator.peak.sim.prequant_marlin`, where each size is cited); the rest
  of the model (attention, norms, embeddings, ``lm_head``) runs as is in its compute dtype. On ``cpu``
  gptqmodel's torch kernels are not modelled: :func:`cpu_refusal` says so and the row's peak is null.

- ``mxfp4`` (gpt-oss: the MoE experts' weights as 4-bit e2m1 values, two per uint8 in ``*_blocks``, with one
  e8m0 uint8 exponent per 32 in ``*_scales``; attention, router, embeddings and ``lm_head`` stored in bfloat16):
  on ``cpu`` transformers 5 dequantizes the experts to the load dtype while loading (``Mxfp4HfQuantizer``:
  ``_process_model_before_weight_loading`` sets ``dequantize=True`` on CPU unless ``use_kernels=True``, and
  ``validate_environment`` does where the ``kernels`` package or Triton is missing; the loader's
  ``Mxfp4Dequantize`` op then writes ``convert_moe_packed_tensors``' output, shaped and typed as
  ``GptOssExperts``' own parameters), so the model is the plain ``GptOssForCausalLM`` in that dtype. On ``cuda``
  ``Mxfp4GptOssMLP`` keeps the blocks and scales as stored and calls triton_kernels' ``matmul_ogs`` (CUDA only): a
  stand-in holds and allocates what its published source says (:mod:`estimator.peak.sim.prequant_mxfp4`, where
  each size is cited).

- ``torchao`` (``Int8WeightOnlyConfig``, ``IntxWeightOnlyConfig`` int1-8 ``unpacked_to_int8``): each quantized
  ``nn.Linear`` weight is torchao's tensor subclass, made on the fakes by torchao's own ``quantize_`` with the
  checkpoint's config; its own ``linear`` runs (:mod:`estimator.peak.sim.prequant_torchao`). Other torchao configs
  (``Int4WeightOnlyConfig``'s CUDA-only kernels among them) keep a null peak with the reason
  (:func:`cpu_refusal`).

Other methods (GPTQ / AWQ variants Marlin does not take, bitsandbytes stored checkpoints)
are not simulated here: :func:`scheme_of` answers None for them and the row says so.
"""

from __future__ import annotations

import contextlib
import enum
import functools
import importlib.util
import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

__all__ = ["Scheme", "cpu_refusal", "held_label", "note", "pack", "quantize_on_meta", "scheme_of"]

# transformers 4.57 integrations/finegrained_fp8.py FP8Linear.forward: act_quant(input, block_size[1])
_FP8_SCALE_BYTES = 4  # act_quant's scales: x.new_empty(..., K // block_k, dtype=torch.float32)


class Scheme(enum.Enum):
    """The pre-quantized formats simulated, by ``quant_method``."""

    COMPRESSED_TENSORS = "compressed-tensors"
    FP8 = "fp8"
    GPTQ = "gptq"
    AWQ = "awq"
    MXFP4 = "mxfp4"
    TORCHAO = "torchao"


def scheme_of(quantization_config: dict[str, Any] | None) -> Scheme | None:
    """The scheme of a checkpoint's ``quantization_config`` when it is simulated here, else None."""
    if not isinstance(quantization_config, dict):
        return None
    method = str(quantization_config.get("quant_method") or "")
    if method == Scheme.FP8.value:
        return Scheme.FP8
    if method == Scheme.MXFP4.value:
        return Scheme.MXFP4
    if method in (Scheme.GPTQ.value, Scheme.AWQ.value):
        return _marlin_scheme(quantization_config)
    if method == Scheme.TORCHAO.value and importlib.util.find_spec("torchao") is not None:
        return Scheme.TORCHAO  # its configs not simulated get a reason (cpu_refusal)
    if (method == Scheme.COMPRESSED_TENSORS.value and ct_formats(quantization_config) <= _CT_DECOMPRESSED
            and importlib.util.find_spec("compressed_tensors") is not None):
        return Scheme.COMPRESSED_TENSORS
    return None


def _marlin_scheme(qc: dict[str, Any]) -> Scheme | None:
    """GPTQ / AWQ checkpoints whose default CUDA kernel is Marlin (:mod:`estimator.peak.sim.prequant_marlin`):
    gptqmodel's ``MarlinQuantLinear`` takes symmetric 4/8-bit ``gptq`` checkpoints, ``AwqMarlinLinear`` 4/8-bit
    ``gemm`` ones; others (asymmetric GPTQ, ``gptq_v2``, AWQ ``gemv`` / ``gemv_fast`` / ``llm-awq``) are not modelled."""
    bits = qc.get("bits", 4)
    if bits not in (4, 8):
        return None
    if qc.get("quant_method") == Scheme.GPTQ.value:
        fmt = str(qc.get("checkpoint_format") or qc.get("format") or "gptq").lower()
        return Scheme.GPTQ if qc.get("sym", True) and fmt == "gptq" else None
    fmt = str(qc.get("version") or qc.get("format") or "gemm").lower()
    return Scheme.AWQ if fmt == "gemm" else None


def cpu_refusal(quantization_config: dict[str, Any], dtype: str, device: str = "cpu") -> str | None:
    """Why a GPTQ / AWQ row has no peak, else None: on ``cpu`` gptqmodel's CPU kernels are not modelled; a float32
    row is not Marlin's (``SUPPORTS_DTYPES = [torch.float16, torch.bfloat16]`` in marlin.py / marlin_awq.py)."""
    scheme = scheme_of(quantization_config)
    if scheme is Scheme.TORCHAO:
        from estimator.peak.sim.prequant_torchao import refusal

        return refusal(quantization_config, dtype, device)
    if scheme not in (Scheme.GPTQ, Scheme.AWQ):
        return None
    if device != "cpu":
        return (None if dtype != "float32" else f"float32: Marlin computes in float16 / bfloat16 only (gptqmodel "
                f"MarlinQuantLinear.SUPPORTS_DTYPES), so a float32 {scheme.value} row is not modelled; peak_bytes is null")
    return (f"{dtype}: a pre-quantized {scheme.value} checkpoint on CPU runs gptqmodel's torch kernels, which are not "
            "modelled (its CUDA path, Marlin, is: --device cuda); peak_bytes is null")


def _marlin_words(qc: dict[str, Any]) -> str:
    group = qc.get("group_size") or 128
    act = ", act order" if qc.get("desc_act") and qc.get("quant_method") == Scheme.GPTQ.value else ""
    return f"{str(qc.get('quant_method')).upper()} {qc.get('bits', 4)}-bit group {group if group > 0 else 'per-channel'}{act}"


# compressed-tensors formats whose decompression is torch code (compressors/pack_quantized, naive_quantized, dense)
_CT_DECOMPRESSED = frozenset({"pack-quantized", "naive-quantized", "float-quantized", "int-quantized", "dense"})


def ct_formats(qc: dict[str, Any]) -> set[str]:
    groups = qc.get("config_groups") or {}
    found = {str(g.get("format") or qc.get("format") or "") for g in groups.values() if isinstance(g, dict)}
    found.add(str(qc.get("format") or "dense"))
    return found - {""} or {"dense"}


def ct_weights(qc: dict[str, Any]) -> str:
    """A few words on a compressed-tensors checkpoint's weights: '4-bit int, group 128' and the like."""
    parts = []
    for group in (qc.get("config_groups") or {}).values():
        w = group.get("weights") if isinstance(group, dict) else None
        if isinstance(w, dict):
            part = f"{w.get('num_bits')}-bit {w.get('type')} ({w.get('strategy')}"
            part += f" {w.get('group_size')})" if w.get("group_size") else ")"
            parts.append(part)
    return ", ".join(sorted(set(parts))) or "weights as stored"


def held_label(quantization_config: dict[str, Any], device: str, load_dtype: str) -> str:
    """The row's ``weights_held``: the scheme and the kernel the simulation assumed."""
    scheme = scheme_of(quantization_config)
    if scheme is Scheme.COMPRESSED_TENSORS:
        return (f"compressed-tensors {'/'.join(sorted(ct_formats(quantization_config)))} {ct_weights(quantization_config)}, "
                f"decompressed to {load_dtype} at the first forward")
    if scheme in (Scheme.GPTQ, Scheme.AWQ):
        return f"{_marlin_words(quantization_config)} as stored; Marlin kernel (modelled from its source)"
    if scheme is Scheme.TORCHAO:
        from estimator.peak.sim import prequant_torchao

        return prequant_torchao.held_label(quantization_config)
    if scheme is Scheme.MXFP4:
        return (f"mxfp4 experts, dequantized to {load_dtype} at load (CPU)" if device == "cpu" else
                "mxfp4 experts as stored; triton_kernels matmul_ogs (modelled from its source)")
    block = quantization_config.get("weight_block_size") or [128, 128]
    if device == "cpu":
        return f"fp8 blocks {block[0]}x{block[1]}, dequantized to {load_dtype} at load (CPU)"
    return f"fp8 blocks {block[0]}x{block[1]} as stored; finegrained-fp8 kernel (modelled)"


def note(quantization_config: dict[str, Any], device: str, load_dtype: str) -> str:
    """The row's note: how the pre-quantized layers were run."""
    scheme = scheme_of(quantization_config)
    if scheme is Scheme.COMPRESSED_TENSORS:
        return ("pre-quantized compressed-tensors checkpoint: transformers' CompressedTensorsHfQuantizer swaps the layers "
                "as stored; compressed-tensors' own decompression runs at the first forward (every quantized layer "
                f"unpacked and dequantized to {load_dtype}, the packed tensors dropped), then the layers compute in "
                f"{load_dtype}; the peak includes that decompression")
    if scheme in (Scheme.GPTQ, Scheme.AWQ):
        from estimator.peak.sim.prequant_marlin import ASSUMED_SMS

        return (f"pre-quantized {_marlin_words(quantization_config)} checkpoint: modelled, not measured (no GPU here). "
                "transformers loads it through gptqmodel, whose default CUDA kernel on an Ampere GPU is Marlin "
                "(Swordfish/Machete, ranked above it where their extensions load, e.g. Hopper, are not modelled); "
                "Marlin is CUDA only, so each quantized linear holds its packed weights and scales as Marlin keeps "
                "them (GPTQModel nn_modules/qlinear/marlin.py / marlin_awq.py post_init) plus its int32 workspace "
                f"(utils/marlin.py marlin_make_workspace_new: max(SMs, 128); {ASSUMED_SMS} SMs assumed, an A100), "
                "and each call allocates gptq_marlin_gemm's output and fp32-reduce buffer "
                "(gptqmodel_ext/marlin/gptq_marlin.cu: SMs x min(round16(m), 64) x 256 float32; a_tmp m x k with "
                f"act order); the rest of the model runs as is in {load_dtype}")
    if scheme is Scheme.TORCHAO:
        from estimator.peak.sim import prequant_torchao

        return prequant_torchao.note(quantization_config, load_dtype)
    if scheme is Scheme.MXFP4 and device != "cpu":
        from estimator.peak.sim.prequant_marlin import ASSUMED_SMS

        return ("pre-quantized mxfp4 checkpoint: modelled, not measured (no GPU here). transformers' Mxfp4GptOssMLP "
                "keeps the experts' blocks and scales as stored (uint8; triton_kernels StridedLayout below compute "
                f"capability 9: an A100, {ASSUMED_SMS} SMs, assumed; Hopper's padded layout is not modelled) and "
                "float32 biases, and calls the Hub kernel kernels-community/gpt-oss-triton-kernels (CUDA only), so "
                "each MoE layer allocates what its source says (huggingface/kernels-community gpt_oss_triton_kernels: "
                "routing.py SortTokens / _compute_expt_data_internal's gate scales and indices; matmul_ogs.py "
                "init_allocation: gate_up's output T*k x I, down's fused-scatter output (T*k + T) x H kept as the "
                "MLP output, and the float32 split-k scratchpad where opt_flags picks split_k > 1); the rest of the "
                f"model runs as is in {load_dtype}")
    if scheme is Scheme.MXFP4:
        return ("pre-quantized mxfp4 checkpoint on CPU: transformers dequantizes the MoE experts to "
                f"{load_dtype} while loading (Mxfp4HfQuantizer sets dequantize=True on CPU without use_kernels=True, "
                "or without the kernels package / Triton; integrations/mxfp4.py convert_moe_packed_tensors), so the "
                f"model is the plain one, simulated in {load_dtype}; the load's own dequantization temporaries are "
                "outside this peak")
    if device == "cpu":
        return ("pre-quantized fp8 checkpoint on CPU: transformers dequantizes it to "
                f"{load_dtype} while loading (no GPU: FineGrainedFP8HfQuantizer sets dequantize=True); "
                f"the model is simulated in {load_dtype}")
    return ("pre-quantized fp8 checkpoint: FP8Linear layers hold the float8 weights and float32 block scales as stored; "
            "the finegrained-fp8 kernel is CUDA only and cannot run here, so each matmul's buffers are modelled from "
            "its published source (transformers 4.57 integrations/finegrained_fp8.py: act_quant's float8 input copy "
            "and float32 scales per 128 columns, the output, nan_to_num's copy; MoE experts' grouped calls assumed to "
            "make the same input copy, scales and output); the rest of the model runs as is")


def quantize_on_meta(model: nn.Module, quantization_config: dict[str, Any], *, device: str) -> nn.Module:
    """Swap ``model``'s layers (on meta) as ``from_pretrained`` does for this pre-quantized checkpoint: transformers'
    quantizer for its ``quant_method``; the FP8 checkpoint on ``cpu`` is dequantized at load (left as built)."""
    scheme = scheme_of(quantization_config)
    if scheme is None:
        raise ValueError(f"not a simulated pre-quantized scheme: {quantization_config.get('quant_method')}")
    if (scheme in (Scheme.FP8, Scheme.MXFP4) and device == "cpu") or scheme is Scheme.TORCHAO:  # torchao: pack
        return model
    if scheme is Scheme.MXFP4:
        from estimator.peak.sim.prequant_mxfp4 import swap_mlps

        swap_mlps(model, quantization_config)
        return model
    if scheme in (Scheme.GPTQ, Scheme.AWQ):
        if device == "cpu":
            raise ValueError(cpu_refusal(quantization_config, "this row"))
        from estimator.peak.sim.prequant_marlin import swap_linears

        swap_linears(model, quantization_config, awq=scheme is Scheme.AWQ)
        return model
    from transformers.quantizers.auto import AutoHfQuantizer, AutoQuantizationConfig

    config = AutoQuantizationConfig.from_dict(dict(quantization_config))
    quantizer = AutoHfQuantizer.from_config(config, pre_quantized=True)
    with _quiet():
        if scheme is Scheme.FP8:  # the CUDA path (validate_environment would look for a GPU: none here)
            quantizer.preprocess_model(model, device_map=None)  # a PreTrainedModel
        else:
            quantizer.validate_environment(device_map=None)
            with _no_progress_bars():
                quantizer.preprocess_model(model, device_map=None)
    for module in model.modules():  # the stored shapes compressed-tensors' unpacking reads (see the module docstring)
        shape = module._parameters.get("weight_shape")
        if shape is not None and not shape.is_meta:
            module._prequant_weight_shape = torch.Size(int(v) for v in shape.tolist())  # type: ignore[assignment]
    return model


def pack(model: nn.Module, fake_mode: FakeTensorMode, quantization_config: dict[str, Any], *, device: str) -> tuple[str, ...]:
    """Ready a materialised model's pre-quantized layers for the forward (see the module docstring); the notes
    that say how they run."""
    from estimator.peak.workload import model_dtype

    scheme = scheme_of(quantization_config)
    if scheme is Scheme.COMPRESSED_TENSORS:
        hooks = model._forward_pre_hooks
        for key, hook in list(hooks.items()):
            if getattr(hook, "__name__", "") == "ct_decompress_hook":
                hooks[key] = functools.partial(_decompressing, hook)
    elif scheme is Scheme.TORCHAO:
        from estimator.peak.sim import prequant_torchao

        if prequant_torchao.config_of(quantization_config) is None:
            raise ValueError(cpu_refusal(quantization_config, "this row", device))
        with _quiet():
            prequant_torchao.quantize(model, fake_mode, quantization_config)
    elif scheme is Scheme.FP8 and device != "cpu":
        from transformers.integrations.finegrained_fp8 import FP8Experts, FP8Linear

        for module in model.modules():
            if isinstance(module, (FP8Linear, FP8Experts)):
                module.forward = functools.partial(_fp8_forward, module.forward)  # type: ignore[method-assign]
    dtype = str(model_dtype(model, torch.bfloat16)).removeprefix("torch.")
    return (note(quantization_config, device, dtype),)


def _decompressing(hook: Callable[..., Any], model: nn.Module, args: Any) -> Any:
    with _stored_shapes(model), _quiet(), _no_progress_bars(), _fresh_ranges():
        found = hook(model, args)
    _weights_relabelled(model)
    return found


@contextlib.contextmanager
def _fresh_ranges() -> Iterator[None]:
    """compressed-tensors caches each quantization range as a tensor (``_calculate_range``, an ``lru_cache``): made
    under this simulation's fake mode, it would be a fake tensor handed to the next simulation's fake mode or to a real
    run in the same process (the app's, a test worker's), which torch refuses. Emptied before and after."""
    from compressed_tensors.quantization.utils import helpers

    helpers._calculate_range.cache_clear()
    try:
        yield
    finally:
        helpers._calculate_range.cache_clear()


def _weights_relabelled(model: nn.Module) -> None:
    """The decompressed weights are the model's weights from now on: the tracker (the dispatch mode running the
    step) files them under weights rather than the step's temporaries."""
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    from estimator.options import Component
    from estimator.peak.sim.tracker import StorageTracker

    for mode in _get_current_dispatch_mode_stack():
        if isinstance(mode, StorageTracker):
            mode.relabel([*model.parameters(), *model.buffers()], Component.WEIGHTS)


@contextlib.contextmanager
def _stored_shapes(model: nn.Module) -> Iterator[None]:
    """While compressed-tensors decompresses, each layer's ``weight_shape`` reads as the shape it stores."""
    from compressed_tensors.compressors.base import BaseCompressor
    from compressed_tensors.compressors.pack_quantized.base import PackedQuantizationCompressor

    current: list[nn.Module] = []
    by_module, by_state = BaseCompressor.__dict__["decompress_module"], PackedQuantizationCompressor.__dict__["decompress"]

    def decompress_module(cls: type, module: nn.Module, *args: Any, **kwargs: Any) -> Any:
        current.append(module)
        try:
            return by_module.__func__(cls, module, *args, **kwargs)
        finally:
            current.pop()

    def decompress(cls: type, state_dict: dict[str, Any], scheme: Any) -> Any:
        shape = vars(current[-1]).get("_prequant_weight_shape") if current else None
        held = state_dict.get("weight_shape")
        if shape is None or held is None:
            return by_state.__func__(cls, state_dict, scheme)
        found = by_state.__func__(cls, {**state_dict, "weight_shape": shape}, scheme)
        return {**found, "weight_shape": held} if "weight_shape" in found else found

    BaseCompressor.decompress_module = classmethod(decompress_module)
    PackedQuantizationCompressor.decompress = classmethod(decompress)
    try:
        yield
    finally:
        BaseCompressor.decompress_module = by_module
        PackedQuantizationCompressor.decompress = by_state


def _fp8_forward(forward: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    import transformers.integrations.finegrained_fp8 as fp8

    saved = fp8.fp8_linear, fp8.fp8_grouped_matmul
    fp8.fp8_linear, fp8.fp8_grouped_matmul = _fp8_linear_buffers, _fp8_grouped_buffers
    try:
        return forward(*args, **kwargs)
    finally:
        fp8.fp8_linear, fp8.fp8_grouped_matmul = saved


def _fp8_linear_buffers(input: torch.Tensor, weight: torch.Tensor, weight_scale_inv: torch.Tensor,
                        block_size: list[int] | None = None, bias: torch.Tensor | None = None,
                        activation_scale: torch.Tensor | None = None, allow_deepgemm: bool = True) -> torch.Tensor:
    """transformers 4.57 ``FP8Linear.forward`` with its Triton calls left out (they write into these buffers):
    ``qinput, scale = act_quant(input, block_size[1])`` and ``output = w8a8_block_fp8_matmul_triton(...)`` stay
    alive until the forward returns, through ``output + bias`` and ``torch.nan_to_num(output)``."""
    qinput, scale, output = _act_quant_and_output(input, weight.shape[-2], block_size)
    if bias is not None:
        output = output + bias
    output = torch.nan_to_num(output, nan=0.0)
    del qinput, scale
    return output.to(dtype=input.dtype)


def _fp8_grouped_buffers(input: torch.Tensor, weight: torch.Tensor, weight_scale_inv: torch.Tensor, offsets: torch.Tensor,
                         tokens_per_expert: torch.Tensor, block_size: list[int] | None) -> torch.Tensor:
    """The grouped (MoE experts) call of the same kernel: its activation quantization and output, as the dense one
    (assumed: the grouped kernel's source is not in transformers' tree)."""
    qinput, scale, output = _act_quant_and_output(input, weight.shape[-2], block_size)
    del qinput, scale
    return output


def _act_quant_and_output(input: torch.Tensor, out_features: int,
                          block_size: list[int] | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``act_quant``'s float8 copy of the input and float32 scales, and the matmul's output ``C``."""
    x = input.contiguous()
    block_k = block_size[1] if block_size else x.shape[-1]
    qinput = torch.empty_like(x, dtype=torch.float8_e4m3fn)  # act_quant's y
    scale = x.new_empty((*x.shape[:-1], -(-x.shape[-1] // block_k)), dtype=torch.float32)  # act_quant's s
    output = x.new_empty((*x.shape[:-1], out_features), dtype=input.dtype)  # w8a8_block_fp8_matmul_triton's C
    return qinput, scale, output


@contextlib.contextmanager
def _no_progress_bars() -> Iterator[None]:
    """compressed-tensors shows tqdm bars on stderr ("Applying quantization config", "Compressing model",
    "Decompressing model", "Dispatching model")."""
    import importlib

    patched = []
    for name in ("compressed_tensors.compressors.model_compressors.model_compressor", "compressed_tensors.offload.dispatch",
                 "compressed_tensors.quantization.lifecycle.apply"):
        module = importlib.import_module(name)
        if hasattr(module, "tqdm"):
            patched.append((module, getattr(module, "tqdm")))  # noqa: B009 (not every module has it: typed as Module)
            setattr(module, "tqdm", _no_bar)  # noqa: B010
    try:
        yield
    finally:
        for module, bar in patched:
            setattr(module, "tqdm", bar)  # noqa: B010


def _no_bar(iterable: Any = None, *args: Any, **kwargs: Any) -> Any:
    return iterable


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """compressed-tensors logs through loguru and shows tqdm bars on every (de)compression; transformers warns."""
    loggers = [logging.getLogger(name) for name in ("transformers", "compressed_tensors")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        from loguru import logger as loguru_logger

        loguru_logger.disable("compressed_tensors")
    except ImportError:  # compressed-tensors without loguru
        loguru_logger = None  # type: ignore[assignment]
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)
        if loguru_logger is not None:
            loguru_logger.enable("compressed_tensors")


def loads(text: str) -> dict[str, Any]:
    """The ``quantization_config`` a recipe carries (as JSON text, so that the recipe stays hashable)."""
    found = json.loads(text)
    assert isinstance(found, dict)
    return found
