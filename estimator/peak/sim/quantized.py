"""bitsandbytes int8 and int4 models on fake tensors: inference (generate's prefill and decode, a plain
forward) and int8 + LoRA training, with what bitsandbytes' own kernels allocate.

The model is quantized as ``from_pretrained(..., quantization_config=BitsAndBytesConfig(load_in_8bit=True))``
(or ``load_in_4bit=True``) leaves it: transformers' own quantizer swaps the Linear layers it does not skip
(:func:`quantize_on_meta`); after :func:`~estimator.peak.materialize.materialize`, :func:`pack` gives each
layer its quantized storage as fake tensors (int8: ``Int8Params`` data ``CB``, int8 ``out x in``, with
``SCB``, one float32 scale per row; int4: the packed uint8 and ``QuantState`` of
:func:`estimator.peak.sim.qlora.pack_weights`), and wraps its forward in :class:`BnbKernels`, a dispatch mode
that runs each ``bitsandbytes::`` op as the device's kernel does, so that its temporaries are tracked:

- ``device="cpu"`` (bitsandbytes 0.50's CPU path): the kernels that are torch code are bitsandbytes' own
  functions, collected by re-running its backend modules (``backends/default/ops.py``,
  ``backends/cpu/ops.py``) with a recording ``register_kernel`` (:func:`_collected`): LLM.int8()'s
  ``int8_vectorwise_quant`` (``A.abs() >= threshold``, the row-wise int8 copy), ``int8_mixed_scaled_mm``,
  ``int8_scaled_mm``, ``int8_linear_matmul`` (``torch._int_mm`` with AVX-512, else float32 copies of
  both operands), ``int8_mm_dequant`` (float32 products of the int32 result); 4-bit ``gemm_4bit``
  (``dequantize_4bit``, a compute-dtype copy of the whole weight, then ``F.linear``). Kernels written in
  C (``dequantize_4bit``, ``gemv_4bit``) allocate only their outputs, which their fake registrations make;
  ``gemv_4bit``'s wrapper casts (to and from bfloat16) are added here. Where bitsandbytes finds
  AVX512-BF16 (``has_avx512bf16()``, as ``Linear4bit`` checks it), the first eval forward of each 4-bit
  layer repacks its weight (``_convert_weight_packed_for_cpu``: an int32 copy of every 4-bit value, absmax
  to bfloat16) and every later matmul, prefill or decode, is the fused ``gemv_4bit``: no dequantized
  weight. That repacking is bitsandbytes' own function, run on the fakes.
- ``device="cuda"`` (bitsandbytes 0.50's CUDA path, from its source ``backends/cuda/ops.py``; not run
  here): ``int8_vectorwise_quant`` writes an int8 copy and float32 row scales, ``int8_linear_matmul`` an
  int32 ``M x N`` result (cuBLASLt's workspace is not modelled), ``int8_mm_dequant`` a float16 result
  cast to the input dtype; ``gemm_4bit`` runs the fused kernel (output only) for ``M <= 4`` rows (batch-1
  decode) and dequantizes the whole weight to the compute dtype then calls ``F.linear`` for ``M > 1536``
  (prefill); between the two, bitsandbytes chooses per GPU (SM count, architecture, shape:
  ``_gemm_4bit_use_custom_cuda``) and the dequantizing path, the larger, is assumed (a note says so).

LLM.int8()'s outlier decomposition depends on the data: columns of the input with a value at or above
the threshold (6.0, transformers' ``llm_int8_threshold``) are multiplied in 16 bits. Fake tensors carry
no values, so the step is simulated with no outlier column (``outliers.any()`` answered False); each
outlier column a real batch has adds ``(tokens + out_features) x 2`` bytes while the int8 product is
made, and an output-sized copy after its float32 temporaries are freed (``output.addmm``). The note says so.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import logging
import types
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode

from estimator.peak.sim.qlora import CUDA_FUSED_MAX_M, QLORA_CUDA
from estimator.peak.workload import model_dtype

__all__ = ["BnbKernels", "INT8_THRESHOLD", "describe", "pack", "quantize_on_meta"]

INT8_THRESHOLD = 6.0  # transformers' BitsAndBytesConfig(llm_int8_threshold=6.0), the LLM.int8() paper's value
_CPU_ROWS_BLOCK = 32  # _convert_weight_packed_for_cpu's block_n: out_features must be a multiple of it


def describe(bits: int, device: str) -> str:
    """The note that says how the quantized layers were run."""
    if bits == 8:
        return ("bitsandbytes LLM.int8() (load_in_8bit, llm_int8_threshold 6.0): Linear8bitLt forward on the quantized "
                f"int8 weights with bitsandbytes' {device.upper()} kernels (int8 copy of each input, int32 product, its "
                "dequantization); no outlier column assumed (LLM.int8()'s 16-bit columns depend on the data: each one a "
                "batch has adds (tokens + out_features) x 2 bytes to a layer's matmul)")
    if device == "cpu":
        from bitsandbytes.functional import has_avx512bf16

        how = ("this CPU has AVX512-BF16: each layer's weight is repacked at its first forward (an int32 copy of its "
               "4-bit values meanwhile) and every matmul is the fused gemv_4bit" if has_avx512bf16() else
               "gemm_4bit dequantizes each layer's weight to the compute dtype, then F.linear")
    else:
        how = ("gemm_4bit: fused kernel for up to 4 rows (batch-1 decode), the weight dequantized to the compute dtype "
               "then F.linear above 1,536 rows; between, bitsandbytes picks by GPU and shape and the dequantizing "
               "path (the larger) is assumed")
    return (f"bitsandbytes 4-bit (load_in_4bit, nf4, blocks of 64, compute dtype = the load dtype): Linear4bit "
            f"forward with bitsandbytes' {device.upper()} kernels; {how}")


def quantize_on_meta(model: nn.Module, bits: int, *, compute_dtype: torch.dtype) -> nn.Module:
    """Swap ``model``'s Linear layers for bitsandbytes' (still on meta) with transformers' own quantizer, as
    ``from_pretrained(load_in_8bit / load_in_4bit=True)`` does, and mark the model as loaded so."""
    if bits == 4:
        from estimator.peak.sim.qlora import quantize_on_meta as quantize_4bit

        return quantize_4bit(model, compute_dtype=compute_dtype)
    from transformers import BitsAndBytesConfig
    from transformers.quantizers.quantizer_bnb_8bit import Bnb8BitHfQuantizer

    quantizer = Bnb8BitHfQuantizer(BitsAndBytesConfig(load_in_8bit=True, llm_int8_threshold=INT8_THRESHOLD))
    quantizer.preprocess_model(model, device_map=None)  # type: ignore[arg-type]  # a PreTrainedModel
    model.hf_quantizer = quantizer  # type: ignore[assignment]  # what from_pretrained sets
    quantizer.postprocess_model(model)  # type: ignore[arg-type]  # config.quantization_config, is_loaded_in_8bit
    return model


def pack(model: nn.Module, fake_mode: FakeTensorMode, bits: int, *, device: str) -> nn.Module:
    """Give every bitsandbytes layer of a materialised model its quantized storage as fake tensors and run
    its forward under :class:`BnbKernels` (see the module docstring). Returns the model, changed in place."""
    import bitsandbytes as bnb

    if bits == 4:
        from estimator.peak.sim.qlora import pack_weights

        pack_weights(model, fake_mode, device=None)  # the storage only; the kernels are BnbKernels'
        layers: list[nn.Module] = [m for m in model.modules() if isinstance(m, bnb.nn.Linear4bit)]
    else:
        int8_layers = [m for m in model.modules() if isinstance(m, bnb.nn.Linear8bitLt)]
        layers = list(int8_layers)
        for module in int8_layers:
            with fake_mode:
                cb = torch.empty((module.out_features, module.in_features), dtype=torch.int8)
                scb = torch.empty((module.out_features,), dtype=torch.float32)
            # Int8Params cannot wrap a fake tensor: a fake Parameter with the attributes bitsandbytes reads
            # (as Int8Params._quantize leaves them: data is CB, CB and SCB attributes).
            weight = nn.Parameter(cb, requires_grad=False)
            for name, value in {"CB": cb, "SCB": scb, "has_fp16_weights": False}.items():
                setattr(weight, name, value)
            module.weight = weight
            module.register_buffer("_quant_scb", scb, persistent=False)  # counted with the weights, as held
    kernels = BnbKernels(device)
    for layer in layers:
        layer.forward = functools.partial(_forward_with, kernels, layer, layer.forward)
    return model


_CAST_WARNING = logging.getLogger("bitsandbytes.autograd._functions")  # "inputs will be cast ... to float16", every forward


def _forward_with(kernels: BnbKernels, module: nn.Module, forward: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    level = _CAST_WARNING.level
    _CAST_WARNING.setLevel(logging.ERROR)
    try:
        with kernels, _cpu_repacking_tracked(module):
            return forward(*args, **kwargs)
    finally:
        _CAST_WARNING.setLevel(level)


@contextlib.contextmanager
def _cpu_repacking_tracked(module: nn.Module) -> Iterator[None]:
    """While a 4-bit layer's forward runs, its absmax buffer follows the ``QuantState`` that
    ``_convert_weight_packed_for_cpu`` rewrites (the old float32 absmax is freed there, as in the real run)."""
    if "_quant_absmax" not in module._buffers:
        yield
        return
    import bitsandbytes.nn.modules as modules

    original = modules._convert_weight_packed_for_cpu

    def converting(qweight: torch.Tensor, state: Any, *args: Any, **kwargs: Any) -> Any:
        found = original(qweight, state, *args, **kwargs)
        module._buffers["_quant_absmax"] = found[1].absmax
        return found

    modules._convert_weight_packed_for_cpu = converting  # type: ignore[assignment]  # the same call, the buffer followed
    try:
        yield
    finally:
        modules._convert_weight_packed_for_cpu = original


# Elementwise ops whose CPU TensorIterator casts an input of another dtype than the result's into a temporary
# copy (TensorIteratorBase::compute_types, CPU only; CUDA casts inside the kernel). The bitsandbytes kernels mix
# dtypes (int32 x float32 in int8_mm_dequant, float16 x float32 in int8_vectorwise_quant); measured on the CPU
# allocator: ``int32 (128 x 128) * float32 (128 x 128)`` peaks at three 64 KiB buffers, not two.
_PROMOTING = (torch.ops.aten.mul.Tensor, torch.ops.aten.add.Tensor, torch.ops.aten.sub.Tensor, torch.ops.aten.div.Tensor)


def _promoted(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """``args`` with every tensor operand of another dtype than the result's cast to it (a tracked copy)."""
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    if len(tensors) < 2:
        return args
    result = torch.result_type(args[0], args[1])
    return tuple(a.to(result) if isinstance(a, torch.Tensor) and a.dim() and a.dtype != result else a for a in args)


_SCALAR_OPS = (torch.ops.aten.is_nonzero.default, torch.ops.aten._local_scalar_dense.default)


class BnbKernels(TorchDispatchMode):
    """Runs each ``bitsandbytes::`` op as ``device``'s kernel does (see the module docstring); every other
    op passes through. Nested ``bitsandbytes::`` ops come back here."""

    def __init__(self, device: str) -> None:
        super().__init__()
        self.device = device
        self._no_outliers = 0
        self._in_kernel = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if self._no_outliers and func in _SCALAR_OPS and args[0].dtype is torch.bool:
            return False  # outliers.any(): no input value reaches the threshold (see the module docstring)
        name = func.name()
        if not name.startswith("bitsandbytes::"):
            if self._in_kernel and self.device == "cpu" and func in _PROMOTING:
                args = _promoted(args)
            return func(*args, **kwargs)
        kernel = (_cuda_kernels() if self.device == "cuda" else _cpu_kernels()).get(name.removesuffix(".default"))
        if kernel is None:  # a kernel that allocates only its outputs (C code): the fake registration makes them
            return func(*args, **kwargs)
        outlier_op = name.startswith("bitsandbytes::int8_vectorwise_quant")
        self._no_outliers += outlier_op
        self._in_kernel += 1
        try:
            with self:
                return kernel(*args, **kwargs)
        finally:
            self._no_outliers -= outlier_op
            self._in_kernel -= 1


def _collected(module_name: str, device: str) -> dict[str, Callable[..., Any]]:
    """bitsandbytes' own kernels for ``device`` in ``module_name`` (a backend module): its source re-run with a
    ``register_kernel`` that records instead of registering (the functions are registered as ``_``, so they
    cannot be imported by name)."""
    import bitsandbytes._ops as ops

    found: dict[str, Callable[..., Any]] = {}

    def record(name: str, dev: str, *_: Any, **__: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def keep(fn: Callable[..., Any]) -> Callable[..., Any]:
            if dev == device:
                found[name] = fn
            return fn
        return keep

    spec = importlib.util.find_spec(module_name)
    assert spec is not None and spec.loader is not None and spec.origin is not None
    module = types.ModuleType(module_name + "_recorded")
    module.__package__, module.__file__ = module_name.rsplit(".", 1)[0], spec.origin
    source = spec.loader.get_source(module_name)  # type: ignore[attr-defined]  # a SourceFileLoader
    saved, ops.register_kernel = ops.register_kernel, record  # type: ignore[assignment]
    quiet = logging.getLogger(module.__name__)  # the logger its code makes: logging.getLogger(__name__)
    level = quiet.level
    # its import-time warnings were given once by the real import; here, inside a simulation, a record of one would
    # hold the exception it logs and through its traceback this simulation's frames (estimator.peak.sim.library_logs)
    quiet.setLevel(logging.ERROR)
    try:
        exec(compile(source, spec.origin, "exec"), module.__dict__)  # noqa: S102 - bitsandbytes' own installed source
    finally:
        ops.register_kernel = saved
        quiet.setLevel(level)
    return found


# The ops whose CPU kernel is C code allocating only its outputs (backends/cpu/ops.py, with its native library).
_NATIVE_CPU = ("bitsandbytes::dequantize_4bit", "bitsandbytes::quantize_blockwise", "bitsandbytes::dequantize_blockwise",
               "bitsandbytes::quantize_4bit")


@functools.cache
def _cpu_kernels() -> dict[str, Callable[..., Any]]:
    kernels = {k: v for k, v in _collected("bitsandbytes.backends.default.ops", "default").items() if k not in _NATIVE_CPU}
    cpu = _collected("bitsandbytes.backends.cpu.ops", "cpu")
    if "bitsandbytes::int8_linear_matmul" in cpu:  # torch._int_mm where torch has AVX-512 (as bitsandbytes registers it)
        kernels["bitsandbytes::int8_linear_matmul"] = cpu["bitsandbytes::int8_linear_matmul"]
    if "bitsandbytes::gemv_4bit" in cpu:  # the fused C kernel behind its wrapper's casts
        kernels["bitsandbytes::gemv_4bit"] = _cpu_gemv_4bit
    return kernels


def _cpu_gemv_4bit(A: torch.Tensor, B: torch.Tensor, shapeB: Any, absmax: torch.Tensor, code: torch.Tensor,
                   blocksize: int) -> torch.Tensor:
    """backends/cpu/ops.py ``gemv_4bit`` (AVX512-BF16): the input and absmax to bfloat16, a bfloat16 output
    written by the C kernel, cast back to the input dtype."""
    dtype = A.dtype
    if dtype != torch.bfloat16:
        A = A.to(torch.bfloat16)
    if absmax.dtype != torch.bfloat16:
        absmax = absmax.to(torch.bfloat16)
    out = torch.empty((*A.shape[:-1], shapeB[0]), dtype=torch.bfloat16, device=A.device)
    return out if dtype == torch.bfloat16 else out.to(dtype)


@functools.cache
def _cuda_kernels() -> dict[str, Callable[..., Any]]:
    default = _collected("bitsandbytes.backends.default.ops", "default")
    return {
        "bitsandbytes::int8_mixed_scaled_mm": default["bitsandbytes::int8_mixed_scaled_mm"],  # no CUDA kernel: torch code
        "bitsandbytes::int8_scaled_mm": default["bitsandbytes::int8_scaled_mm"],
        "bitsandbytes::int8_vectorwise_quant": _cuda_int8_vectorwise_quant,
        "bitsandbytes::int8_linear_matmul": _cuda_int8_linear_matmul,
        "bitsandbytes::int8_mm_dequant": _cuda_int8_mm_dequant,
        "bitsandbytes::gemm_4bit": _cuda_gemm_4bit,
    }


# The CUDA kernels below are bitsandbytes 0.50's backends/cuda/ops.py wrappers with their C calls left out
# (the C kernels write into the buffers the wrappers allocate).

def _cuda_int8_vectorwise_quant(A: torch.Tensor, threshold: float = 0.0) -> tuple[torch.Tensor, torch.Tensor, Any]:
    rows = A.numel() // A.shape[-1]
    row_stats = torch.empty(rows, device=A.device, dtype=torch.float32)
    out_row = torch.empty(A.shape, device=A.device, dtype=torch.int8)
    outlier_cols = None
    if threshold > 0.0:
        outliers = A.abs() >= threshold
        if outliers.any():  # answered False by BnbKernels
            outlier_cols = torch.argwhere(outliers.any(dim=0)).view(-1)
        else:
            outlier_cols = torch.empty(0, device=A.device, dtype=torch.int64)
        del outliers
    return out_row, row_stats, outlier_cols


def _cuda_int8_linear_matmul(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    return torch.empty((*A.shape[:-1], B.shape[0]), device=A.device, dtype=torch.int32)


def _cuda_int8_mm_dequant(A: torch.Tensor, row_stats: torch.Tensor, col_stats: torch.Tensor,
                          dtype: torch.dtype | None = None, bias: torch.Tensor | None = None) -> torch.Tensor:
    out = torch.empty_like(A, dtype=torch.float16)
    if bias is not None and bias.dtype != torch.float16:
        out.add_(bias)
    return out.to(dtype or torch.float16)


def _cuda_gemm_4bit(A: torch.Tensor, B: torch.Tensor, shapeB: Any, absmax: torch.Tensor, blocksize: int, quant_type: str,
                    bias: torch.Tensor | None = None, absmax_8bit: torch.Tensor | None = None,
                    absmax_code: torch.Tensor | None = None, absmax_offset: torch.Tensor | None = None) -> torch.Tensor:
    K = A.shape[-1]
    M = A.numel() // K
    if M <= CUDA_FUSED_MAX_M and K % blocksize == 0:  # the fused kernel writes the output only
        A = A.contiguous()
        return torch.empty((*A.shape[:-1], shapeB[0]), dtype=A.dtype, device=A.device)
    nested = []  # _dequant_linear_fallback: the nested absmax dequantized first (both live until it returns)
    if absmax_8bit is not None:
        absmax_dq = torch.empty_like(absmax_8bit, dtype=torch.float32)
        nested = [absmax_dq, absmax_dq + absmax_offset if absmax_offset is not None else absmax_dq]
    B_dq = torch.empty(shapeB, dtype=A.dtype, device=A.device)
    out = torch.nn.functional.linear(A, B_dq, bias)
    del nested
    return out


def quantize_for(model: nn.Module, bits: int, mode: str) -> nn.Module:
    """The engine's hook before ``prepare``: the bitsandbytes swap of a ``kbit`` recipe, computing in the
    dtype the model was built in (QLoRA's 4-bit training keeps :mod:`estimator.peak.sim.qlora`'s own path)."""
    compute = model_dtype(model, torch.bfloat16)
    return quantize_on_meta(model, bits, compute_dtype=compute)


def pack_for(model: nn.Module, fake_mode: FakeTensorMode, bits: int, mode: str, device: str) -> tuple[str, ...]:
    """The engine's hook after ``materialize``: the quantized storage and kernels; the notes to add."""
    if mode == "training" and bits == 4:  # QLoRA (estimator.peak.sim.qlora), its gemm_4bit as the device's kernel runs it
        from estimator.peak.sim.qlora import pack_weights

        pack_weights(model, fake_mode, device=device)
        return (QLORA_CUDA,) if device == "cuda" else ()
    pack(model, fake_mode, bits, device=device)
    return (describe(bits, device),)


def refusal(resolved: Any, load_row: Any, dtype: Any, parallel: Any) -> str | None:
    """Why an int8 / int4 row's peak is not simulated (None when it is): a row without load figures, a
    checkpoint quantized by another method (its stored layout is not bitsandbytes'), a parallel strategy."""
    from estimator.load.rows import checkpoint_bits
    from estimator.options import DType

    if dtype not in (DType.INT8, DType.INT4):
        return None
    if load_row.total_bytes is None:
        return f"{dtype.value}: no load figures for this row, so no peak is simulated; peak_bytes is null"
    declared = resolved.config.get("quantization_config")
    if isinstance(declared, dict) and checkpoint_bits(declared) != ("bitsandbytes", 8 if dtype is DType.INT8 else 4):
        return (f"{dtype.value}: the checkpoint is pre-quantized ({declared.get('quant_method')}); its own layers' peaks "
                "are not simulated yet (bitsandbytes int8 / int4 rows are); peak_bytes is null")
    if parallel is not None and parallel.strategy is not None:
        return f"{dtype.value}: bitsandbytes models are simulated on one device; under {parallel.strategy} peak_bytes is null"
    return None


def inference_plan(resolved: Any, load: Any, dtype: Any) -> tuple[Any, Any]:
    """The dtype an int8 / int4 inference row's model is built in (the load dtype of its load row, everything
    bitsandbytes does not quantize, and the 4-bit compute dtype) and its recipe."""
    from estimator.load.rows import kept_dtype_of
    from estimator.options import DType
    from estimator.peak.sim.training import Recipe

    kept = kept_dtype_of(resolved, load).dtype or DType.BFLOAT16
    return kept, Recipe(kbit=True, kbit_bits=8 if dtype is DType.INT8 else 4)
