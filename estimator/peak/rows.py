"""Inference and training rows: the load figures of each dtype plus the simulated peak.

The peak comes from :func:`estimator.peak.simulate_peak`, which runs the model's own forward (and
backward and AdamW step) on fake tensors. What this version simulates, row by row:

- inference: float32, float16 and bfloat16 rows (prefill with the KV cache, as ``generate`` runs it);
- training: float32 rows, and 16-bit rows with ``--pure-16bit`` (weights, gradients and AdamW
  states all in 16 bits). Mixed-precision 16-bit training, quantized rows (float8, int8, int4),
  other optimizers, gradient checkpointing and LoRA are not simulated yet: their ``peak_bytes`` is
  null with a note saying so, never a guess.

``device="cuda"`` swaps PyTorch's attention function for the duration of a simulation, so
simulations are serialised with a lock (the app serves requests from several threads).
"""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import TYPE_CHECKING

from estimator.errors import Option, UnsupportedError
from estimator.options import Device, DType, Library, Mode
from estimator.result import Row

if TYPE_CHECKING:
    from estimator.options import HardwareSpec, LoadSpec, WorkSpec
    from estimator.source.resolve import Resolved

_SIMULATION_LOCK = threading.Lock()
_SIMULATED_DTYPES = (DType.FLOAT32, DType.FLOAT16, DType.BFLOAT16)


def _why_not(dtype: DType, work: WorkSpec) -> str | None:
    """Why this row's peak is not simulated, or None when it is."""
    if dtype not in _SIMULATED_DTYPES:
        return f"{dtype.value}: peaks of quantized models are not simulated yet; peak_bytes is null"
    if work.mode is Mode.TRAINING and dtype.is_16bit and not work.training.pure_16bit:
        return (f"{dtype.value}: mixed-precision training (fp32 master weights, 16-bit autocast) is not simulated yet; "
                "peak_bytes is null (--pure-16bit simulates a pure 16-bit step)")
    return None


def peak_rows(resolved: Resolved, load: LoadSpec, work: WorkSpec, hardware: HardwareSpec) -> tuple[Row, ...]:
    """Rows with ``peak_bytes`` and ``components`` for ``work.mode`` (inference or training).

    ``work`` and ``hardware`` were checked by :func:`estimator.options.check_supported`.
    """
    from estimator.load.rows import build, built_rows
    from estimator.peak import simulate_peak

    if resolved.library not in (Library.TRANSFORMERS, Library.TIMM):
        raise UnsupportedError([
            Option("mode"), f" {work.mode.value} is simulated for transformers and timm models; "
            f"{resolved.library.value} models get load figures only (", Option("mode"), " load).",
        ])
    rows = []
    for load_row in built_rows(resolved, load):
        dtype = DType.parse(load_row.dtype, option="dtypes")
        reason = _why_not(dtype, work)
        if reason is not None:
            rows.append(replace(load_row, notes=(*load_row.notes, reason)))
            continue
        model = build(resolved, dtype, trust_remote_code=load.trust_remote_code)
        with _SIMULATION_LOCK:
            result = simulate_peak(
                model,
                mode="training" if work.mode is Mode.TRAINING else "inference",
                device="cpu" if hardware.device is Device.CPU else "cuda",
                batch_size=work.shape.batch_size,
                seq_len=work.shape.text_len,
                image_size=work.shape.image_size,
                max_new_tokens=work.shape.max_new_tokens,
            )
        rows.append(replace(
            load_row,
            peak_bytes=result.peak_bytes,
            components=dict(result.components),
            method=result.method,
            notes=(*load_row.notes, *result.notes),
        ))
    return tuple(rows)
