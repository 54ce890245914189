"""Load-mode rows: from a meta build (``method: "exact"``) or from safetensors headers (``"stored"``)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from estimator import hub
from estimator.options import DType, Library
from estimator.result import Row
from estimator.stored import stored_bytes, tensors_from_metadata

if TYPE_CHECKING:
    from torch import nn

    from estimator.api import Options
    from estimator.resolve import Resolved

logger = logging.getLogger(__name__)

QUANT_NOTE = "{dtype}: the bitsandbytes layout is not estimated yet, so no figure is given (not fp32/{div})."
_DIVISOR = {DType.INT8: 4, DType.INT4: 8}
ADAM_BYTES_FP32 = 4 + 8  # gradient + two fp32 moments per parameter
ADAM_BYTES_MIXED = 2 + 4 + 8  # 16-bit gradient + fp32 master + two fp32 moments


def _null_row(dtype: DType, note: str) -> Row:
    return Row(dtype=dtype.value, total_bytes=None, largest_layer_bytes=None, training_adam_bytes=None, method="exact", notes=(note,))


def _quant_row(dtype: DType) -> Row:
    return _null_row(dtype, QUANT_NOTE.format(dtype=dtype.value, div=_DIVISOR[dtype]))


def build(resolved: Resolved, dtype: DType, *, trust_remote_code: bool = False) -> nn.Module:
    """The resolved model built on the meta device in ``dtype``'s torch dtype."""
    from estimator.build import build_timm, build_transformers, torch_dtype

    if resolved.library is Library.TIMM:
        return build_timm(resolved.config, torch_dtype(dtype), model=resolved.name)
    remote_ref = str(resolved.ref.path) if resolved.ref.path is not None else resolved.ref.repo_id
    return build_transformers(resolved.config, torch_dtype(dtype), model=resolved.name, trust_remote_code=trust_remote_code, remote_ref=remote_ref)


def built_rows(resolved: Resolved, options: Options) -> tuple[Row, ...]:
    """Exact rows: the real model built on meta in each dtype, its unique tensors counted."""
    from estimator.weights import measure, training_adam_bytes

    rows = []
    for dtype in options.dtypes:
        if dtype in _DIVISOR:
            rows.append(_quant_row(dtype))
            continue
        if dtype is DType.FLOAT8:
            rows.append(_fp8_row(resolved, options))
            continue
        weights = measure(build(resolved, dtype, trust_remote_code=options.trust_remote_code))
        rows.append(Row(
            dtype=dtype.value,
            total_bytes=weights.total_bytes,
            largest_layer_bytes=weights.largest_layer_bytes,
            training_adam_bytes=training_adam_bytes(weights, mixed_precision=dtype.is_16bit),
            method="exact",
            notes=(f"largest layer: {', '.join(weights.largest_layer_names[:3])}",) if weights.largest_layer_names else (),
        ))
    return tuple(rows)


def _fp8_row(resolved: Resolved, options: Options) -> Row:
    if resolved.library is not Library.TRANSFORMERS:
        return _null_row(DType.FLOAT8, "float8 rows follow transformers' FP8 quantization; not available for timm models.")
    from estimator.quant import to_fp8
    from estimator.weights import measure

    model, skipped = to_fp8(build(resolved, DType.FLOAT8, trust_remote_code=options.trust_remote_code))
    weights = measure(model)
    kept = ", ".join(skipped) if skipped else "none"
    return Row(
        dtype=DType.FLOAT8.value,
        total_bytes=weights.total_bytes,
        largest_layer_bytes=weights.largest_layer_bytes,
        training_adam_bytes=None,
        method="exact",
        notes=(
            "float8: Linear weights in float8_e4m3fn with a float32 scale per 128x128 block (transformers FineGrainedFP8Config); "
            f"kept in bfloat16: embeddings, norms, non-Linear layers and {kept}",
            "training_adam_bytes is null: an FP8-quantized model is not trained as is",
        ),
    )


def stored_rows(resolved: Resolved, options: Options, *, token: str | None, timeout: float, cross_check: bool) -> tuple[Row, ...] | None:
    """Rows from the repo's safetensors headers, or None when it has none (then the model is built)."""
    if resolved.library not in (Library.TRANSFORMERS, Library.TIMM) or resolved.ref.repo_id is None:
        return None
    if not any(name.endswith(".safetensors") for name in resolved.files):
        return None
    metadata = hub.safetensors_metadata(resolved.ref.repo_id, revision=resolved.revision, token=token, timeout=timeout)
    if metadata is None:
        return None
    tensors = tensors_from_metadata(metadata)
    if not tensors:
        return None
    notes: list[str] = []
    quant_method = (resolved.config.get("quantization_config") or {}).get("quant_method")
    if cross_check:
        notes.extend(_cross_check(resolved, options, sum(t.numel for t in tensors)))
    rows = []
    for dtype in options.dtypes:
        if dtype in _DIVISOR:
            rows.append(_quant_row(dtype))
            continue
        stored = stored_bytes(tensors, dtype)
        row_notes = [f"from the checkpoint's safetensors headers; largest layer: {stored.largest_layer_name}", *notes]
        training: int | None
        if stored.quantized:
            training = None
            row_notes.append(f"pre-quantized checkpoint ({quant_method or 'integer or float8 tensors'}): quantized tensors counted as stored; not trainable as is")
        else:
            per_param = ADAM_BYTES_MIXED if dtype.is_16bit else ADAM_BYTES_FP32
            training = stored.total_bytes + stored.floating_parameters * per_param
        rows.append(Row(
            dtype=dtype.value,
            total_bytes=stored.total_bytes,
            largest_layer_bytes=stored.largest_layer_bytes,
            training_adam_bytes=training,
            method="stored",
            notes=tuple(row_notes),
        ))
    return tuple(rows)


def _cross_check(resolved: Resolved, options: Options, stored_elements: int) -> list[str]:
    """Compare the checkpoint's element count with the meta build's; a mismatch becomes a note."""
    from estimator.errors import EstimatorError

    try:
        model = build(resolved, DType.BFLOAT16, trust_remote_code=options.trust_remote_code)
    except EstimatorError as exc:
        return [f"cross-check skipped: {exc}"]
    params = {id(p): p.numel() for p in model.parameters()}
    persistent: dict[int, int] = {}
    for module in model.modules():
        for name, buffer in module.named_buffers(recurse=False):
            if buffer is not None and name not in module._non_persistent_buffers_set:
                persistent[id(buffer)] = buffer.numel()
    built = sum(params.values()) + sum(n for k, n in persistent.items() if k not in params)
    if built == stored_elements:
        return [f"cross-checked: the meta build stores the same {built:,} elements"]
    return [f"mismatch: the checkpoint stores {stored_elements:,} elements, the meta build of {type(model).__name__} has {built:,} ({stored_elements - built:+,})"]
