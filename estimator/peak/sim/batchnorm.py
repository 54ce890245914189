"""The refusal of a training step that the model's own BatchNorm refuses: one value per channel.

In training mode ``torch.nn.functional.batch_norm`` raises ``ValueError: Expected more than 1 value per
channel when training`` when a BatchNorm layer sees a single value per channel: a ``BatchNorm1d`` on
(B, C) features at batch size 1 (LeViT's attention and classifier heads, GroupViT's projection MLP). The
real run fails the same way, on CPU and on a GPU, so there is no peak to answer. The estimator says so
in one line, names the layer and what to change (a batch of 2 or more), rather than a formula
figure for a step that cannot run.
"""

from __future__ import annotations

from types import TracebackType

from torch import nn

from estimator.errors import BadOptionError, Option

__all__ = ["batch_one_refusal"]

_MESSAGE = "Expected more than 1 value per channel when training"


def batch_one_refusal(exc: BaseException, model: nn.Module) -> BadOptionError | None:
    """The refusal for ``exc`` if it is BatchNorm's one-value-per-channel error, else None."""
    if not isinstance(exc, ValueError) or _MESSAGE not in str(exc):
        return None
    layer = _batchnorm_in(exc.__traceback__) or "BatchNorm"
    return BadOptionError([f"training {type(model).__name__} at ", Option("batch_size"),
                           f" 1 fails in the model's own code: its {layer} sees one value per channel in training mode "
                           f"(PyTorch: \"{_MESSAGE}\"; the real run fails the same way); use ", Option("batch_size"),
                           " 2 or more"], option="batch_size")


def _batchnorm_in(tb: TracebackType | None) -> str | None:
    """The class name of the innermost BatchNorm module on the traceback (``self`` of its ``forward``)."""
    found = None
    while tb is not None:
        owner = tb.tb_frame.f_locals.get("self")
        if isinstance(owner, nn.modules.batchnorm._BatchNorm):
            found = type(owner).__name__
        tb = tb.tb_next
    return found
