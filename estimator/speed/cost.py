"""What one phase of a run costs on a device, counted from the model's own operations (no time yet).

The contract between the counters (which run the model's code on fake tensors and count each op)
and the time model (which turns a count into seconds on a given device). Counts are exact for the
traced program: FLOPs by ``torch.utils.flop_counter``'s registry (and formulas it lacks, named in
``OpCost.formula``), bytes as what each kernel reads from and writes to device memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


class Phase(str, Enum):
    """The phases a speed answer is given for."""

    PREFILL = "prefill"          # the prompt's forward (time to first token)
    DECODE = "decode"            # one decode step at a given context (tokens/s = batch / time)
    FORWARD = "forward"          # a plain forward (inference without generate)
    TRAIN_FORWARD = "train_forward"
    BACKWARD = "backward"
    OPTIMIZER = "optimizer"


@dataclass(frozen=True)
class OpCost:
    """One kernel (or one fused kernel) of the trace.

    ``name``: the ATen op (``aten.mm.default``) or the fused kernel's name; ``flops``: floating-point
    operations (a multiply-add counts 2, as flop_counter does); ``bytes_read`` / ``bytes_written``:
    device-memory traffic of this kernel; ``dtype``: the compute dtype (``"bfloat16"``) that picks the
    peak FLOP/s; ``formula``: where the FLOPs come from (``"flop_counter"``, or the name of our own
    formula where flop_counter has none).
    """

    name: str
    flops: int
    bytes_read: int
    bytes_written: int
    dtype: str
    formula: str = "flop_counter"


@dataclass(frozen=True)
class PhaseCost:
    """Every op of one phase, with totals derived once."""

    phase: Phase
    ops: tuple[OpCost, ...]
    tokens: int                   # tokens this phase processes (prompt tokens, or batch for one decode step)
    flops: int = field(init=False)
    bytes_moved: int = field(init=False)
    kernels: int = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "flops", sum(op.flops for op in self.ops))
        object.__setattr__(self, "bytes_moved", sum(op.bytes_read + op.bytes_written for op in self.ops))
        object.__setattr__(self, "kernels", len(self.ops))
