"""pytorch_modelsize's ``SizeEstimator``, same call and return shape, numbers from the simulator.

The old tool fed the input through ``model.modules()`` as if they were a chain (so any functional
op in ``forward()`` broke it), counted every module output twice ("values and gradients") and, as
its README's figure shows, only the last module's parameters. Here the total is the true peak of a
training step (:func:`~estimator.modules.estimate.estimate_module`, AdamW), split the old way:

- ``param_bits``: the model's parameters, each once;
- ``input_bits``: the input;
- ``forward_backward_bits``: everything else alive at the peak — activations saved for backward,
  backward's temporaries, gradients and optimizer states — so the three add up to the peak.

``estimate_size()`` returns ``(megabytes, bits)`` as before; "megabytes" are MiB (the old tool
divided by 1024**2 as well).
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from estimator.errors import BadOptionError
from estimator.modules.estimate import estimate_module
from estimator.result import Estimate

__all__ = ["SizeEstimator"]

_DTYPE_FOR_BITS = {32: "float32", 16: "float16"}


class SizeEstimator:
    """``SizeEstimator(model, input_size=(1, 1, 32, 32), bits=32)``; ``input_size`` includes the batch."""

    def __init__(
        self,
        model: nn.Module,
        input_size: Sequence[int] = (1, 1, 32, 32),
        bits: int = 32,
        *,
        device: str = "cuda",
        optimizer: str = "adamw",
    ) -> None:
        if bits not in _DTYPE_FOR_BITS:
            raise BadOptionError(f"bits must be 32 or 16; got {bits!r}.")
        self.model = model
        self.input_size = tuple(input_size)
        self.bits = bits
        self.device = device
        self.optimizer = optimizer
        self.estimate: Estimate | None = None
        self.param_bits: int | None = None
        self.forward_backward_bits: int | None = None
        self.input_bits: int | None = None

    def estimate_size(self) -> tuple[float, int]:
        """``(size in megabytes, size in bits)`` of a training step's peak; also sets the ``*_bits``."""
        dtype = _DTYPE_FOR_BITS[self.bits]
        self.estimate = estimate_module(
            self.model, self.input_size, dtypes=(dtype,), device=self.device, optimizer=self.optimizer,
            pure_16bit=True,
        )
        row = self.estimate.rows[0]
        assert row.peak_bytes is not None
        item = self.bits // 8
        params = {id(p): p for p in self.model.parameters()}
        param_bytes = sum(p.numel() * item for p in params.values())
        input_bytes = row.components.get("inputs", 0)
        self.param_bits = 8 * param_bytes
        self.input_bits = 8 * input_bytes
        self.forward_backward_bits = 8 * (row.peak_bytes - param_bytes - input_bytes)
        total = 8 * row.peak_bytes
        return total / 8 / 1024**2, total
