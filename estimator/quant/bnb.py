"""int8 / int4 rows: the layout bitsandbytes leaves after ``load_in_8bit`` / ``load_in_4bit``.

The model is built on the meta device in the dtype of everything bitsandbytes does not quantize
(the load dtype: the caller's ``dtype=``, else transformers' ``dtype="auto"``, the checkpoint's own
dtype; :mod:`estimator.quant.load_dtype`). The layers transformers' bitsandbytes quantizer would swap for
``Linear8bitLt`` / ``Linear4bit`` are chosen with transformers' own functions (:func:`bnb_targets`);
their weights' bytes come from the layout formulas below, one small pure function per layout,
and every other tensor is counted as built. ``tests/test_quant_bnb.py`` loads small models with
real bitsandbytes on CPU and counts every allocated byte, ``quant_state`` included.

What stays in 16 bits (transformers' default ``llm_int8_skip_modules=None``, which means
``get_keys_to_not_convert``): the output head (``get_output_embeddings()``), every module tied
to another (the input embedding when the head is tied), the module owning the model's last
parameter, and the model's ``_keep_in_fp32_modules``. Embeddings, norms, convolutions and biases
(also the biases of quantized layers) are not Linear weights and are never quantized. They are
counted in the load dtype, as built (the model's dtype plan applied: T5's ``wo`` in float32 when the
load dtype is float16). Rotary ``inv_freq`` buffers stay float32 as the modeling code makes them.
The functions below default to float16 (``dtype=torch.float16``, the classic bitsandbytes setting);
the rows pass the resolved load dtype.

Sources: bitsandbytes 0.50 ``nn/modules.py`` (``Int8Params``, ``Params4bit``) and
``functional.py`` (``int8_vectorwise_quant``, ``quantize_4bit``, ``quantize_blockwise``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

from estimator.options import DType
from estimator.quant.load_dtype import FLOAT16_GIVEN, ITEMSIZE, KeptDType

if TYPE_CHECKING:
    from torch import nn

    from estimator.source.stored import StoredTensor

INT4_BLOCKSIZE = 64  # Params4bit's default blocksize (one absmax per 64 values)
NESTED_BLOCKSIZE = 256  # quantize_4bit(compress_statistics=True) re-quantizes absmax in blocks of 256
INT4_CODE_VALUES = 16  # nf4 / fp4 lookup table, float32, one copy per layer
NESTED_CODE_VALUES = 256  # the dynamic 8-bit map of the nested quantization, float32, one copy per layer
FLOAT32_BYTES = 4


class BnbScheme(str, enum.Enum):
    """The bitsandbytes layouts a row can use."""

    INT8 = "int8"  # LLM.int8(): BitsAndBytesConfig(load_in_8bit=True)
    INT4 = "int4"  # nf4 (or fp4: same bytes): BitsAndBytesConfig(load_in_4bit=True)
    INT4_DOUBLE = "int4-double-quant"  # ... plus bnb_4bit_use_double_quant=True

    @classmethod
    def for_dtype(cls, dtype: DType) -> BnbScheme:
        """The layout of an ``int8`` or ``int4`` row (double quantization goes in a note)."""
        return cls.INT8 if dtype is DType.INT8 else cls.INT4

    @property
    def bits(self) -> int:
        return 8 if self is BnbScheme.INT8 else 4


def int8_weight_bytes(out_features: int, in_features: int) -> int:
    """Bytes of one ``Int8Params`` weight after quantization.

    ``int8_vectorwise_quant`` gives ``CB`` (int8, ``out x in``; the parameter's data is ``CB``) and
    ``SCB``, one float32 absmax scale per output row. The outlier columns of LLM.int8() are found
    per forward pass, not stored, so loading holds nothing else.
    """
    return out_features * in_features + out_features * FLOAT32_BYTES


def int4_weight_bytes(numel: int, *, blocksize: int = INT4_BLOCKSIZE, double_quant: bool = False) -> int:
    """Bytes of one ``Params4bit`` weight after quantization, its ``quant_state`` included.

    ``quantize_4bit``: the packed data holds two 4-bit values per byte, ``(numel + 1) // 2`` uint8;
    ``absmax`` has one float32 per block of ``blocksize`` values; ``code`` (the nf4/fp4 table) is
    16 float32 per layer. With double quantization (``compress_statistics``) ``absmax`` is stored
    as uint8 minus its mean ``offset`` (a 0-dim float32), with a nested state: one float32 absmax
    per 256 blocks and its own 256-entry float32 code. The ``quant_state`` tensors are attributes
    of the parameter, not module buffers, so ``model.get_memory_footprint()`` misses them.
    """
    packed = (numel + 1) // 2
    blocks = -(-numel // blocksize)
    code = INT4_CODE_VALUES * FLOAT32_BYTES
    if not double_quant:
        return packed + blocks * FLOAT32_BYTES + code
    nested_blocks = -(-blocks // NESTED_BLOCKSIZE)
    return packed + blocks + code + FLOAT32_BYTES + nested_blocks * FLOAT32_BYTES + NESTED_CODE_VALUES * FLOAT32_BYTES


@dataclass(frozen=True)
class QuantizedBytes:
    """Exact bytes of one model in a bitsandbytes layout."""

    total_bytes: int
    largest_layer_bytes: int
    largest_layer_names: tuple[str, ...]
    quantized_layers: int
    kept_16bit: tuple[str, ...]  # the skip list transformers used
    fused_experts_bytes: int = 0  # MoE experts fused into 3-D tensors: not nn.Linear, so not quantized


def bnb_targets(model: nn.Module) -> tuple[dict[str, tuple[int, int]], tuple[str, ...]]:
    """The layers ``load_in_8bit`` / ``load_in_4bit`` quantize: ``{name: (out_features, in_features)}``.

    transformers models (the root, or each top-level ``PreTrainedModel`` inside a container such as
    a sentence-transformers model, whose other layers stay unquantized): :func:`transformers_targets`.
    diffusers models: :func:`diffusers_targets`. Returns the targets and the skip list.
    """
    from transformers import PreTrainedModel

    if isinstance(model, PreTrainedModel):
        return transformers_targets(model)
    if type(model).__module__.startswith("diffusers."):
        return diffusers_targets(model)
    targets: dict[str, tuple[int, int]] = {}
    kept: list[str] = []
    roots: list[str] = []
    for name, module in model.named_modules():
        if isinstance(module, PreTrainedModel) and not any(name.startswith(root + ".") for root in roots):
            roots.append(name)
            inner, inner_kept = transformers_targets(module)
            targets.update({f"{name}.{key}": value for key, value in inner.items()})
            kept.extend(f"{name}.{key}" for key in inner_kept)
    return targets, tuple(sorted(kept))


def transformers_targets(model: nn.Module) -> tuple[dict[str, tuple[int, int]], tuple[str, ...]]:
    """transformers' choice (``Bnb{4,8}BitHfQuantizer._process_model_before_weight_loading``).

    The skip list from ``HfQuantizer.get_modules_to_not_convert(model, None, _keep_in_fp32_modules)``,
    then ``replace_with_bnb_linear``'s rule: every ``type(m) is nn.Linear`` or GPT-2 ``Conv1D``
    whose name ``should_convert_module`` accepts. transformers' functions are called directly so
    that importing bitsandbytes (13 s here, for torch._dynamo) is not needed to answer.
    """
    from torch import nn as torch_nn
    from transformers.pytorch_utils import Conv1D
    from transformers.quantizers.base import HfQuantizer
    from transformers.quantizers.quantizers_utils import should_convert_module

    kept = HfQuantizer.get_modules_to_not_convert(model, None, getattr(model, "_keep_in_fp32_modules", None))  # type: ignore[arg-type]  # a PreTrainedModel (bnb_targets checks)
    targets: dict[str, tuple[int, int]] = {}
    for name, module in model.named_modules():
        if not should_convert_module(name, kept):
            continue
        if isinstance(module, Conv1D):
            in_features, out_features = module.weight.shape
            targets[name] = (int(out_features), int(in_features))
        elif type(module) is torch_nn.Linear:
            targets[name] = (module.out_features, module.in_features)
    return targets, tuple(sorted(kept))


def diffusers_targets(model: nn.Module) -> tuple[dict[str, tuple[int, int]], tuple[str, ...]]:
    """diffusers' choice (``quantizers/bitsandbytes/utils.py::_replace_with_bnb_linear``, diffusers 0.42).

    Every ``isinstance(m, nn.Linear)`` except those named in the skip list — the default
    ``llm_int8_skip_modules`` (none) plus the class's ``_keep_in_fp32_modules`` — where a key
    matches the module's own name, its full dotted name, or a prefix of it followed by a dot.
    (diffusers does not import bitsandbytes-free helpers for this, so its rule is restated here.)
    """
    from torch import nn as torch_nn

    kept = [k for k in (getattr(model, "_keep_in_fp32_modules", None) or []) if k]
    targets: dict[str, tuple[int, int]] = {}
    for name, module in model.named_modules():
        if not name or not isinstance(module, torch_nn.Linear):
            continue
        if name.rsplit(".", 1)[-1] in kept or any(key + "." in name or key == name for key in kept):
            continue
        targets[name] = (module.out_features, module.in_features)
    return targets, tuple(sorted(kept))


def weight_bytes(scheme: BnbScheme, out_features: int, in_features: int) -> int:
    """Bytes of one quantized Linear weight in ``scheme``'s layout."""
    if scheme is BnbScheme.INT8:
        return int8_weight_bytes(out_features, in_features)
    return int4_weight_bytes(out_features * in_features, double_quant=scheme is BnbScheme.INT4_DOUBLE)


def tensor_sizes(model: nn.Module, scheme: BnbScheme, load_dtype: DType = DType.FLOAT16) -> tuple[dict[str, int], dict[str, tuple[int, int]], tuple[str, ...]]:
    """Bytes of every unique tensor of ``model`` (built on meta in ``load_dtype``) once loaded in ``scheme``.

    Returns the sizes by tensor name (each unique tensor at its first name), the quantized layers
    and the skip list.
    """
    from estimator.build.weights import tensor_bytes, unique_tensors

    targets, kept = bnb_targets(model)
    sizes: dict[str, int] = {}
    for name, tensor in unique_tensors(model):
        module_name, _, leaf = name.rpartition(".")
        if module_name in targets and leaf == "weight":
            sizes[name] = weight_bytes(scheme, *targets[module_name])
        elif module_name in targets:  # the bias of a quantized layer: loaded in the load dtype
            sizes[name] = tensor.numel() * ITEMSIZE[load_dtype]
        else:
            sizes[name] = tensor_bytes(tensor)
    return sizes, targets, kept


def quantized_bytes(model: nn.Module, scheme: BnbScheme, load_dtype: DType = DType.FLOAT16) -> QuantizedBytes:
    """Bytes of ``model`` (built on meta in ``load_dtype``) once loaded with bitsandbytes in ``scheme``."""
    from estimator.build.weights import largest_layer, unique_tensors

    tensors, targets, kept = tensor_sizes(model, scheme, load_dtype)
    sizes: dict[str, int] = {}
    for name, size in tensors.items():
        parts = name.split(".")
        for depth in range(len(parts) + 1):
            prefix = ".".join(parts[:depth])
            sizes[prefix] = sizes.get(prefix, 0) + size
    largest, names = largest_layer(model, sizes)
    fused = sum(tensors[name] for name, tensor in unique_tensors(model) if tensor.dim() == 3 and ".experts." in f".{name}" and name in tensors)
    return QuantizedBytes(
        total_bytes=sizes.get("", 0),
        largest_layer_bytes=largest,
        largest_layer_names=names,
        quantized_layers=len(targets),
        kept_16bit=kept,
        fused_experts_bytes=fused,
    )


def layout_note(scheme: BnbScheme, quantized_layers: int) -> str:
    """The first note of an int8 / int4 row: the layout and how many layers it quantizes."""
    layout = (
        "int8: bitsandbytes LLM.int8() (load_in_8bit): Linear weights in int8 with a float32 scale per output row"
        if scheme is BnbScheme.INT8
        else "int4: bitsandbytes 4-bit (load_in_4bit, nf4 or fp4): Linear weights packed two per byte, a float32 absmax "
        "per 64 values and a 16-entry code per layer (quant_state included)"
    )
    return f"{layout}; {quantized_layers} layers quantized"


def double_quant_note(total_bytes: int) -> str:
    """The int4 row's note with the total under ``bnb_4bit_use_double_quant=True``."""
    return f"with bnb_4bit_use_double_quant=True: {total_bytes:,} bytes"


TRAINING_NULL_NOTE = "training_adam_bytes is null: a bitsandbytes model trains only through adapters (QLoRA), which this row does not estimate"


def fused_experts_note(dtype_name: str, fused_bytes: int | None = None) -> str:
    """Why a mixture-of-experts model's int8 / int4 row is barely smaller than its 16-bit one."""
    size = f" ({fused_bytes:,} bytes)" if fused_bytes else ""
    return (f"the MoE experts stay in {dtype_name}{size}: transformers fuses each layer's experts into 3-D tensors on load, "
            "which are not nn.Linear layers, and bitsandbytes quantizes nn.Linear layers only; so this row is barely "
            "smaller than the 16-bit one")


def bnb_notes(scheme: BnbScheme, weights: QuantizedBytes, load: KeptDType = FLOAT16_GIVEN) -> tuple[str, ...]:
    """The notes of an int8 / int4 row: the layout, what is not quantized and its dtype, why training is null."""
    kept = ", ".join(weights.kept_16bit) if weights.kept_16bit else "none"
    experts = (fused_experts_note(load.named, weights.fused_experts_bytes),) if weights.fused_experts_bytes else ()
    return (
        layout_note(scheme, weights.quantized_layers),
        f"kept in {load.named} ({load.source}): embeddings, norms, biases, non-Linear layers and transformers' skip list ({kept})",
        *experts,
        TRAINING_NULL_NOTE,
    )


QUANT_STATE_SUFFIXES = (".absmax", ".quant_map", ".nested_absmax", ".nested_quant_map", ".SCB", ".offset")


def loaded_from_checkpoint(tensors: list[StoredTensor]) -> list[StoredTensor]:
    """A pre-quantized bitsandbytes checkpoint's tensors as they are held once loaded.

    The safetensors file holds a few things that are not tensors after loading, and lacks one
    that is (bitsandbytes 0.50 ``Params4bit.from_prequantized`` / ``QuantState.from_dict``,
    transformers' 8-bit loading): ``<w>.quant_state.bitsandbytes__nf4`` (or ``__fp4``) is a
    JSON blob packed into uint8 that is parsed into the ``QuantState`` and dropped; ``<w>.weight_format``
    of 8-bit checkpoints (a 0-dim uint8) is read and dropped; the double-quantization ``offset`` is
    stored inside that JSON and becomes a 0-dim float32 tensor. The quantization state (absmax,
    quant_map, SCB, nested state, offset) keeps float32 whatever dtype the model loads in, so it is
    returned as raw bytes (``U8``); every other tensor is returned as stored.
    """
    from estimator.source.stored import SAFETENSORS_ITEMSIZE, StoredTensor

    loaded: list[StoredTensor] = []
    for tensor in tensors:
        if ".quant_state.bitsandbytes__" in tensor.name or tensor.name.endswith("weight_format"):
            continue
        if tensor.name.endswith(".nested_absmax"):
            loaded.append(StoredTensor(name=tensor.name.removesuffix(".nested_absmax") + ".offset", dtype="U8", numel=FLOAT32_BYTES))
        if tensor.name.endswith(QUANT_STATE_SUFFIXES):
            loaded.append(StoredTensor(name=tensor.name, dtype="U8", numel=int(tensor.numel * SAFETENSORS_ITEMSIZE[tensor.dtype])))
        else:
            loaded.append(tensor)
    return loaded
