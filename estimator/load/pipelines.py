"""Rows of multi-component models (diffusers pipelines): each component built and measured, then summed.

A pipeline's total is the sum of its components' exact bytes; its largest layer is the largest
no-split group of any component (``device_map`` places components, and groups inside them, one at a
time); its Adam figure is the sum of the components' (training every component at once, which
fine-tuning scripts rarely do: the note lists each component so a reader can add only the ones
they train). Every row lists each component's bytes in its notes, e.g. ``unet: 9.56 GiB``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from estimator.options import DType
from estimator.result import Method, Row
from estimator.units import format_bytes

if TYPE_CHECKING:
    from estimator.options import LoadSpec
    from estimator.source.resolve import Resolved


@dataclass(frozen=True)
class ComponentBytes:
    """One component's figures in one dtype."""

    name: str
    class_name: str
    total_bytes: int
    largest_layer_bytes: int
    training_adam_bytes: int | None


def summed_row(dtype: DType, parts: list[ComponentBytes], *, method: Method = "exact", notes: tuple[str, ...] = ()) -> Row:
    """One row from per-component figures: totals summed, the largest layer the largest of any."""
    training = None if any(p.training_adam_bytes is None for p in parts) else sum(p.training_adam_bytes or 0 for p in parts)
    listing = "; ".join(f"{p.name} ({p.class_name}): {format_bytes(p.total_bytes)}" for p in parts)
    return Row(
        dtype=dtype.value,
        total_bytes=sum(p.total_bytes for p in parts),
        largest_layer_bytes=max(p.largest_layer_bytes for p in parts),
        training_adam_bytes=training,
        method=method,
        notes=(f"components: {listing}", *notes),
    )


def pipeline_parts(resolved: Resolved, dtype: DType, kept: DType = DType.FLOAT16) -> list[ComponentBytes]:
    """Each weight-holding component's exact bytes in ``dtype`` (float32, float16, bfloat16, int8, int4).

    ``kept``: for int8 / int4, the ``torch_dtype=`` of what bitsandbytes leaves unquantized (float16
    unless ``bnb_compute_dtype`` says otherwise; diffusers has no ``"auto"`` rule to follow here).
    """
    from estimator.build import torch_dtype
    from estimator.build.diffusers_models import build_component, components
    from estimator.build.weights import measure, training_adam_bytes

    parts = []
    for component in components(resolved.extra):
        if dtype in (DType.INT8, DType.INT4):
            from estimator.quant.bnb import BnbScheme, quantized_bytes

            quantized = quantized_bytes(build_component(component, torch_dtype(kept), model=resolved.name), BnbScheme.for_dtype(dtype), kept)
            parts.append(ComponentBytes(component.name, component.class_name, quantized.total_bytes, quantized.largest_layer_bytes, None))
            continue
        weights = measure(build_component(component, torch_dtype(dtype), model=resolved.name))
        parts.append(ComponentBytes(
            component.name, component.class_name, weights.total_bytes, weights.largest_layer_bytes,
            training_adam_bytes(weights, mixed_precision=dtype.is_16bit),
        ))
    return parts


def diffusers_rows(resolved: Resolved, spec: LoadSpec) -> tuple[Row, ...]:
    """One row per dtype for a diffusers repo, each summed over its weight-holding components."""
    rows = []
    for dtype in spec.dtypes:
        if dtype is DType.FLOAT8:
            rows.append(Row(dtype=dtype.value, total_bytes=None, largest_layer_bytes=None, training_adam_bytes=None, method="exact",
                            notes=("float8 rows follow transformers' FP8 quantization; not available for diffusers pipelines.",)))
        elif dtype in (DType.INT8, DType.INT4):
            layout = "int8 with a float32 scale per row" if dtype is DType.INT8 else "4-bit nf4/fp4 with a float32 absmax per 64 values"
            kept = spec.bnb_compute_dtype or DType.FLOAT16
            source = "bnb_compute_dtype" if spec.bnb_compute_dtype else "torch_dtype=torch.float16 assumed"
            rows.append(summed_row(dtype, pipeline_parts(resolved, dtype, kept), notes=(
                (f"every component quantized with bitsandbytes ({layout}): the Linear layers of each model, diffusers' and "
                 f"transformers' skip lists and everything not Linear kept in {kept.value} ({source}; "
                 "PipelineQuantizationConfig with all components)"),
                "training_adam_bytes is null: a bitsandbytes model trains only through adapters (QLoRA)",
            )))
        else:
            rows.append(summed_row(dtype, pipeline_parts(resolved, dtype), notes=(
                "schedulers and tokenizers hold no weights; training_adam_bytes trains every component at once",
            )))
    return tuple(rows)
