"""Inputs of the models of :mod:`estimator.peak.other_inputs` that are fed neither audio nor images by a
feature extractor: time series, reinforcement-learning trajectories, text-to-speech, draft heads.

``model_inputs(model, batch_size, seq_len)`` returns ``(arrays by forward argument name, description)``
or None for a model it does not know.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from torch import nn

__all__ = ["model_inputs"]


def model_inputs(model: nn.Module, batch_size: int, seq_len: int) -> tuple[dict[str, np.ndarray], str] | None:
    """The inputs of a model this module knows, else None."""
    config: Any = model.config
    maker = _MAKERS.get(str(getattr(config, "model_type", "")))
    return maker(config, batch_size, seq_len) if maker is not None else None


_MAKERS: dict[str, Any] = {}
