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

from estimator.errors import UnsupportedError
from estimator.options import DType, Library, Mode, Optimizer
from estimator.result import Row

if TYPE_CHECKING:
    from estimator.api import Options
    from estimator.resolve import Resolved

DEFAULT_SEQ_LEN = 512
_SIMULATION_LOCK = threading.Lock()
_SIMULATED_DTYPES = (DType.FLOAT32, DType.FLOAT16, DType.BFLOAT16)


def check_supported(options: Options) -> None:
    """Refuse, before any work, the training options this version cannot simulate."""
    if options.mode is Mode.TRAINING:
        refused = []
        if options.optimizer is not Optimizer.ADAMW:
            refused.append(f"--optimizer {options.optimizer.value}")
        if options.gradient_checkpointing:
            refused.append("--gradient-checkpointing")
        if options.lora_rank is not None:
            refused.append("--lora-rank")
        if refused:
            raise UnsupportedError(f"{', '.join(refused)} is not simulated yet; training is simulated with full AdamW (--optimizer adamw).")


def _why_not(dtype: DType, options: Options) -> str | None:
    """Why this row's peak is not simulated, or None when it is."""
    if dtype not in _SIMULATED_DTYPES:
        return f"{dtype.value}: peaks of quantized models are not simulated yet; peak_bytes is null"
    if options.mode is Mode.TRAINING and dtype.is_16bit and not options.pure_16bit:
        return (f"{dtype.value}: mixed-precision training (fp32 master weights, 16-bit autocast) is not simulated yet; "
                "peak_bytes is null (--pure-16bit simulates a pure 16-bit step)")
    return None


def peak_rows(resolved: Resolved, options: Options) -> tuple[Row, ...]:
    """Rows with ``peak_bytes`` and ``components`` for ``options.mode`` (inference or training)."""
    from estimator.loadrows import build, built_rows
    from estimator.peak import simulate_peak

    if resolved.library not in (Library.TRANSFORMERS, Library.TIMM):
        raise UnsupportedError(f"--mode {options.mode.value} is simulated for transformers and timm models; {resolved.library.value} models get load figures only (--mode load).")
    check_supported(options)
    rows = []
    for load_row in built_rows(resolved, options):
        dtype = DType.parse(load_row.dtype, option="dtypes")
        assert isinstance(dtype, DType)
        reason = _why_not(dtype, options)
        if reason is not None:
            rows.append(replace(load_row, notes=(*load_row.notes, reason)))
            continue
        model = build(resolved, dtype, trust_remote_code=options.trust_remote_code)
        with _SIMULATION_LOCK:
            result = simulate_peak(
                model,
                mode=options.mode.value,  # type: ignore[arg-type]
                device=options.device.value,  # type: ignore[arg-type]
                batch_size=options.batch_size,
                seq_len=options.seq_len or DEFAULT_SEQ_LEN,
                image_size=options.image_size,
                max_new_tokens=options.max_new_tokens,
            )
        rows.append(replace(
            load_row,
            peak_bytes=result.peak_bytes,
            components=dict(result.components),
            method=result.method,
            notes=(*load_row.notes, *result.notes),
        ))
    return tuple(rows)
