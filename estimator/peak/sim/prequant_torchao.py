"""torchao pre-quantized checkpoints (``quant_method: "torchao"``) on fake tensors, as transformers loads and runs them.

transformers 5 (``TorchAoHfQuantizer``, ``integrations/torchao.py`` ``TorchAoDeserialize``) keeps every ``nn.Linear``
and loads each quantized weight as the torchao tensor subclass the checkpoint's metadata names, rebuilt from its
stored parts (``_weight_qdata``, ``_weight_scale``, ...); the subclass's own ``linear`` then runs each matmul. Which
layers hold one is ``TorchAoHfQuantizer.param_needs_quantization`` (the ``nn.Linear`` weights outside
``modules_to_not_convert``; ``lm_head`` is left as is), the filter that quantized them before saving.

Here the same subclass is made on the fakes by torchao itself: its ``quantize_`` with the checkpoint's own config
(``TorchAoConfig.get_apply_tensor_subclass``, torchao's ``config_from_dict``), on each layer transformers' filter
picks, which builds the subclass from the fake weight (``from_hp``) with the parts' shapes and dtypes the checkpoint
stores; the forward is then torchao's own ``linear`` of that subclass. Configs simulated (:class:`AoConfig`):

- ``Int8WeightOnlyConfig`` (``Int8Tensor``: int8 ``qdata``, float32 ``scale`` and int8 ``zero_point`` per row or
  group; per row ``linear`` casts the int8 weight to the activation dtype for ``torch.mm``, per group it
  dequantizes the weight first);
- ``IntxWeightOnlyConfig`` with ``intx_packing_format`` ``unpacked_to_int8`` (``IntxUnpackedToInt8Tensor``: 1-8 bit
  values held one per int8, scale and zero point per group; ``linear`` dequantizes the weight, then ``F.linear``):
  torchao's int4 (and other widths) weight-only format for CPU.

Both run on ``cpu`` and ``cuda`` (torch code). ``Int4WeightOnlyConfig``, torchao's int4 weight-only format for GPUs,
has CUDA-only kernels:

- ``tile_packed_to_4d`` (``Int4TilePackedTo4dTensor``, tinygemm), on ``cuda`` in bfloat16: simulated the same way
  (:data:`AoConfig.INT4_TILE_PACKED`); its matmul ``aten._weight_int4pack_mm`` has a meta kernel, and its CUDA kernel
  allocates only its output (PyTorch ``aten/src/ATen/native/cuda/int4mm.cu``). Modelled, not measured: it has no
  CPU kernel, so no CPU truth exists, and quantizing needs a compute-capability-8 GPU (:func:`_compute_capability_8`);
- ``plain`` / ``preshuffled`` (the ``mslk`` package's CUDA kernels), ``plain_int32`` (XPU / NPU), and
  ``tile_packed_to_4d`` on ``cpu``: :func:`refusal` says so and the rows keep a null peak.

torchao 0.18's CPU int4 layout (the prototype ``Int4OpaqueTensor``) is not in torchao's safetensors list, so
transformers 5 cannot save it as a checkpoint.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

__all__ = ["AoConfig", "config_of", "held_label", "note", "quantize", "refusal"]


class AoConfig(enum.Enum):
    """The torchao configs (``quant_type``'s ``_type``) whose layers run on fakes here."""

    INT8_WEIGHT_ONLY = "Int8WeightOnlyConfig"
    INTX_WEIGHT_ONLY = "IntxWeightOnlyConfig"
    INT4_TILE_PACKED = "Int4WeightOnlyConfig"  # tile_packed_to_4d (tinygemm): cuda only, bfloat16 only


def _quant_type(qc: dict[str, Any]) -> dict[str, Any] | None:
    """The serialized torchao config of a ``TorchAoConfig`` (``quant_type`` as ``{"default": {...}}`` since
    transformers 4.5x; a bare ``{"_type": ...}`` is taken too); None for the old string form
    (``"int4_weight_only"`` with ``quant_type_kwargs``) and per-module (``FqnToConfig``) ones."""
    found = qc.get("quant_type")
    if isinstance(found, dict) and isinstance(found.get("default"), dict) and len(found) == 1:
        found = found["default"]
    return found if isinstance(found, dict) and isinstance(found.get("_type"), str) else None


def _data(quant_type: dict[str, Any], key: str) -> str:
    value = (quant_type.get("_data") or {}).get(key)
    return str(value.get("_data") if isinstance(value, dict) else value).lower()


def config_of(quantization_config: dict[str, Any] | None) -> AoConfig | None:
    """The simulated torchao config of a checkpoint's ``quantization_config``, else None."""
    if not isinstance(quantization_config, dict) or quantization_config.get("quant_method") != "torchao":
        return None
    quant_type = _quant_type(quantization_config)
    if quant_type is None or int(quant_type.get("_version") or 1) < 2:  # version 1: torchao's older AffineQuantizedTensor
        return None
    name = quant_type["_type"]
    if name == AoConfig.INT8_WEIGHT_ONLY.value:
        return AoConfig.INT8_WEIGHT_ONLY
    if name == AoConfig.INTX_WEIGHT_ONLY.value and _data(quant_type, "intx_packing_format") in ("unpacked_to_int8", "none"):
        return AoConfig.INTX_WEIGHT_ONLY
    if name == AoConfig.INT4_TILE_PACKED.value and _data(quant_type, "int4_packing_format") == "tile_packed_to_4d":
        return AoConfig.INT4_TILE_PACKED
    return None


def words(quantization_config: dict[str, Any]) -> str:
    """A few words on the checkpoint's torchao config: 'torchao IntxWeightOnlyConfig int4, PerGroup 32'."""
    quant_type = _quant_type(quantization_config) or {}
    data = quant_type.get("_data") or {}
    found = data.get("granularity")
    granularity: dict[str, Any] = found if isinstance(found, dict) else {}
    size = (granularity.get("_data") or {}).get("group_size")
    parts = [f"torchao {quant_type.get('_type', quantization_config.get('quant_type'))}"]
    if config_of(quantization_config) is AoConfig.INTX_WEIGHT_ONLY:
        parts.append(_data(quant_type, "weight_dtype"))
    if quant_type.get("_type") == "Int4WeightOnlyConfig":
        parts.append(f"{_data(quant_type, 'int4_packing_format')} group {data.get('group_size', 128)}")
    if granularity:
        parts.append(f"{granularity.get('_type')}{f' {size}' if size else ''}")
    return " ".join(parts[:1]) + (f" {', '.join(parts[1:])}" if parts[1:] else "")


def refusal(quantization_config: dict[str, Any], dtype: str, device: str) -> str | None:
    """Why a torchao checkpoint's row has no peak (None for the configs simulated here)."""
    kind = config_of(quantization_config)
    if kind is AoConfig.INT4_TILE_PACKED and device != "cpu" and dtype != "bfloat16":
        return (f"{dtype}: torchao Int4WeightOnlyConfig (tile_packed_to_4d) computes in bfloat16 only "
                "(Int4TilePackedTo4dTensor); peak_bytes is null (see the bfloat16 row)")
    if kind is not None and (kind is not AoConfig.INT4_TILE_PACKED or device != "cpu"):
        return None
    quant_type = _quant_type(quantization_config)
    if quant_type is not None and quant_type["_type"] == "Int4WeightOnlyConfig":
        packing = _data(quant_type, "int4_packing_format")
        kernel = {"tile_packed_to_4d": "tinygemm (aten._weight_int4pack_mm, no CPU kernel)",
                  "plain_int32": "XPU / NPU kernels"}.get(packing, "the mslk package's CUDA kernels")
        where = ("cannot run on CPU (a real run fails at the first matmul)" if device == "cpu"
                 else "cannot run on fake tensors here and are not modelled")
        also = "; on --device cuda its layers are simulated" if kind is AoConfig.INT4_TILE_PACKED else ""
        return (f"{dtype}: torchao Int4WeightOnlyConfig ({packing or 'plain'}) layers run {kernel}, which {where}; "
                f"peak_bytes is null{also} (torchao IntxWeightOnlyConfig int4 and Int8WeightOnlyConfig checkpoints "
                "are simulated on both)")
    name = quant_type["_type"] if quant_type is not None else quantization_config.get("quant_type")
    return (f"{dtype}: torchao {name} layers are not simulated (Int8WeightOnlyConfig and IntxWeightOnlyConfig, "
            "version 2, are); peak_bytes is null")


def held_label(quantization_config: dict[str, Any]) -> str:
    """The row's ``weights_held``."""
    return f"{words(quantization_config)} as stored (torchao tensor subclasses); torchao's own linear"


def note(quantization_config: dict[str, Any], load_dtype: str) -> str:
    """The row's note: how the torchao layers were run."""
    kind = config_of(quantization_config)
    if kind is AoConfig.INT4_TILE_PACKED:
        return (f"pre-quantized {words(quantization_config)} checkpoint: modelled, not measured (no GPU here). "
                "transformers' TorchAoHfQuantizer loads each quantized nn.Linear weight as torchao's "
                "Int4TilePackedTo4dTensor; torchao's own quantize_ built them here on the fakes (int32 tiles of "
                "in_features padded to a multiple of 1024 and out_features to 8, bfloat16 scales and zeros per "
                "group, as stored; the scales' algorithm, tinygemm or HQQ, leaves the shapes alike, so tinygemm's ran), "
                "and its own linear ran each matmul: aten._weight_int4pack_mm, whose CUDA kernel allocates its "
                "m x n bfloat16 output and nothing else (PyTorch aten/src/ATen/native/cuda/int4mm.cu "
                f"_weight_int4pack_mm_cuda: C_final = at::empty({{m, n}})); the rest of the model runs as is in {load_dtype}")
    how = ("casts the int8 weight to the activation dtype for each matmul per row, or dequantizes it per group"
           if kind is AoConfig.INT8_WEIGHT_ONLY else "dequantizes the weight to the activation dtype for each matmul")
    return (f"pre-quantized {words(quantization_config)} checkpoint: transformers' TorchAoHfQuantizer loads each "
            "quantized nn.Linear weight as torchao's tensor subclass; torchao's own quantize_ built them here on the "
            f"fakes (the parts' shapes and dtypes as stored) and its own linear ran each matmul ({how}); the rest of "
            f"the model runs as is in {load_dtype}")


def quantize(model: nn.Module, fake_mode: FakeTensorMode, quantization_config: dict[str, Any]) -> None:
    """Give each layer transformers' torchao loader would load quantized the torchao subclass weight the checkpoint
    stores, made by torchao's own ``quantize_`` with the checkpoint's config, on the materialised (fake) model.
    ``Int4WeightOnlyConfig`` (``tile_packed_to_4d``): torchao checks for a compute-capability-8 GPU (there is none
    here; the checkpoint was made on one), and its HQQ scales need values, so the tinygemm scales run instead (the
    same shapes)."""
    from torchao.quantization import quantize_
    from transformers.quantizers.auto import AutoHfQuantizer, AutoQuantizationConfig

    config = AutoQuantizationConfig.from_dict(dict(quantization_config))
    quantizer = AutoHfQuantizer.from_config(config, pre_quantized=True)
    quantizer.validate_environment(device_map=None)
    quantizer.preprocess_model(model, device_map=None)  # modules_to_not_convert, as from_pretrained sets it
    ao_config = config.get_apply_tensor_subclass()
    if any(f.name == "set_inductor_config" for f in dataclasses.fields(ao_config)):
        ao_config = dataclasses.replace(ao_config, set_inductor_config=False)  # no global torch._inductor change
    tile_packed = config_of(quantization_config) is AoConfig.INT4_TILE_PACKED
    if tile_packed:
        from torchao.quantization.quantize_.workflows import Int4ChooseQParamsAlgorithm

        ao_config = dataclasses.replace(ao_config, int4_choose_qparams_algorithm=Int4ChooseQParamsAlgorithm.TINYGEMM)
    targets = [module for name, module in model.named_modules()
               if isinstance(module, nn.Linear) and quantizer.param_needs_quantization(model, f"{name}.weight")]
    with fake_mode, (_compute_capability_8() if tile_packed else contextlib.nullcontext()):
        for module in targets:
            quantize_(module, ao_config, filter_fn=lambda m, fqn: m is module)  # noqa: B023 (called at once)


@contextlib.contextmanager
def _compute_capability_8() -> Iterator[None]:
    """``torch.cuda.get_device_capability`` answers (8, 0) (an A100): ``Int4TilePackedTo4dTensor.from_hp`` asks it."""
    asked = torch.cuda.get_device_capability
    torch.cuda.get_device_capability = lambda device=None: (8, 0)
    try:
        yield
    finally:
        torch.cuda.get_device_capability = asked
