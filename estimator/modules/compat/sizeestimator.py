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
divided by 1024**2 as well). The old tool's steps are there too, each setting the attribute it set:
``get_parameter_sizes()`` (``param_sizes``), ``get_output_sizes()`` (``out_sizes``, from the real
``forward()``), ``calc_param_bits()``, ``calc_input_bits()``, ``calc_forward_backward_bits()``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from torch import nn

from estimator.errors import BadOptionError
from estimator.modules.estimate import estimate_module
from estimator.modules.summary import summarize
from estimator.result import Estimate, Row

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
        self.param_sizes: list[np.ndarray] = []
        self.out_sizes: list[np.ndarray] = []

    def get_parameter_sizes(self) -> None:
        """``param_sizes``: the shape of every parameter, each once (the old tool's first step)."""
        params = {id(p): p for p in self.model.parameters()}
        self.param_sizes = [np.array(p.size()) for p in params.values()]

    def get_output_sizes(self) -> None:
        """``out_sizes``: the output shape of every module call of the real ``forward()``, in the
        order the calls return (the old tool chained ``model.modules()`` instead)."""
        s = summarize(self.model, self.input_size, depth=1 << 30, dtype=_DTYPE_FOR_BITS[self.bits], peak=False)
        calls = sorted((c for c in s.calls if c.depth > 0 and not c.is_container), key=lambda c: c.finished)
        self.out_sizes = [np.array(shape) for c in calls for shape in c.output_shapes]

    def calc_param_bits(self) -> None:
        """``param_bits``: every parameter once, at ``bits`` each."""
        if not self.param_sizes:
            self.get_parameter_sizes()
        self.param_bits = int(sum(int(np.prod(s)) for s in self.param_sizes)) * self.bits

    def calc_input_bits(self) -> None:
        """``input_bits``: the input, at ``bits`` per element."""
        self.input_bits = int(np.prod(np.array(self.input_size))) * self.bits

    def calc_forward_backward_bits(self) -> None:
        """``forward_backward_bits``: everything else alive at the training step's peak."""
        row = self._peak_row()
        assert row.peak_bytes is not None
        if self.param_bits is None:
            self.calc_param_bits()
        input_bits = 8 * row.components.get("inputs", 0)
        assert self.param_bits is not None
        self.forward_backward_bits = 8 * row.peak_bytes - self.param_bits - input_bits

    def estimate_size(self) -> tuple[float, int]:
        """``(size in megabytes, size in bits)`` of a training step's peak; also sets the ``*_bits``."""
        self.estimate = None
        self.get_parameter_sizes()
        self.calc_param_bits()
        self.calc_input_bits()
        self.calc_forward_backward_bits()
        assert self.param_bits is not None and self.input_bits is not None and self.forward_backward_bits is not None
        total = self.param_bits + self.forward_backward_bits + self.input_bits
        return total / 8 / 1024**2, total

    def _peak_row(self) -> Row:
        if self.estimate is None:
            self.estimate = estimate_module(
                self.model, self.input_size, dtypes=(_DTYPE_FOR_BITS[self.bits],), device=self.device,
                optimizer=self.optimizer, pure_16bit=True,
            )
        return self.estimate.rows[0]
