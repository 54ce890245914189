"""Inputs of transformers' probabilistic time-series transformers: Time Series Transformer, Informer, Autoformer.

Their forward takes no token ids: a batch of past values with their time features and observed mask,
and (training, and the base model's forward as its docs show it) the future values with their time
features. Everything is shaped by the model's config, as transformers' docs describe the batch a
``GluonTS``-style loader makes (``B`` = batch size):

- ``past_values`` (B, P) — (B, P, input_size) for a multivariate config — with ``P`` = ``context_length +
  max(lags_sequence)`` (the model's ``_past_length``: the context plus the lags' look-back);
- ``past_time_features`` (B, P, F), ``F`` = ``num_time_features + num_dynamic_real_features``;
- ``past_observed_mask`` ones of ``past_values``' shape (no missing values);
- ``static_categorical_features`` (B, num_static_categorical_features) zeros (the first category of each),
  ``static_real_features`` (B, num_static_real_features), where the config has them;
- ``future_values`` (B, prediction_length[, input_size]) and ``future_time_features`` (B, prediction_length, F).

Training: the prediction model's loss (negative log-likelihood of ``future_values``), or for the base
model the sum of its last hidden state. Inference: the prediction model runs ``generate`` as its docs do
(the encoder once, then ``prediction_length`` greedy decoder passes over ``num_parallel_samples`` sample
paths); the base model one forward of the same batch. Autoformer's top-k autocorrelation delays are
answered as on tied scores (:mod:`estimator.peak.inputs.routing`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
from torch import nn

from estimator.peak.inputs.other.models import Found
from estimator.peak.inputs.other.workloads import arrays_workload
from estimator.peak.inputs.routing import with_ties
from estimator.peak.workload import Workload

__all__ = ["series_arrays", "workload"]

_TYPES = ("time_series_transformer", "informer", "autoformer")


def workload(model: nn.Module, *, batch_size: int, seq_len: int, image_size: int | None) -> Workload | None:
    """The workload of a time-series transformer (see the module docstring), else None."""
    config: Any = getattr(model, "config", None)
    if config is None or getattr(config, "model_type", None) not in _TYPES:
        return None

    arrays, description = series_arrays(config, batch_size)
    if type(model).__name__.endswith("ForPrediction"):
        def generate(m: nn.Module, x: dict[str, Any]) -> Any:
            return m.generate(**{k: v for k, v in x.items() if k != "future_values"})  # type: ignore[operator]

        samples = int(getattr(config, "num_parallel_samples", 100))
        description += f"; inference: generate ({samples} sample paths, {config.prediction_length} decoder passes)"
        found = arrays_workload(model, arrays, description, Found(arrays, description, infer=generate))
    else:
        found = arrays_workload(model, arrays, description, Found(arrays, description))
    if config.model_type != "autoformer":
        return found
    # Autoformer's attention picks the top-k autocorrelation delays and indexes and rolls by them: which
    # delays does not change what is allocated; they are answered as on tied scores (estimator.peak.inputs.routing)

    return replace(found, context=with_ties(found.context),
                   description=f"{found.description}; the top-k autocorrelation delays taken as on tied scores "
                               "(which delays does not change the memory)")


def series_arrays(config: Any, b: int) -> tuple[dict[str, np.ndarray], str]:
    """The batch of the module docstring (numpy arrays by forward argument name) and its description."""
    past = int(config.context_length) + max(int(lag) for lag in config.lags_sequence)
    future = int(config.prediction_length)
    channels = int(config.input_size)
    features = int(config.num_time_features) + int(config.num_dynamic_real_features)
    values = (lambda n: (b, n)) if channels == 1 else (lambda n: (b, n, channels))
    arrays: dict[str, np.ndarray] = {
        "past_values": np.zeros(values(past), np.float32),
        "past_time_features": np.zeros((b, past, features), np.float32),
        "past_observed_mask": np.ones(values(past), np.float32),
        "future_values": np.zeros(values(future), np.float32),
        "future_time_features": np.zeros((b, future, features), np.float32),
    }
    statics = ""
    if int(config.num_static_categorical_features):
        arrays["static_categorical_features"] = np.zeros((b, int(config.num_static_categorical_features)), np.int64)
        statics += f", static_categorical_features {b}x{config.num_static_categorical_features}"
    if int(config.num_static_real_features):
        arrays["static_real_features"] = np.zeros((b, int(config.num_static_real_features)), np.float32)
        statics += f", static_real_features {b}x{config.num_static_real_features}"
    shape = "x".join(map(str, values(past)))
    return arrays, (f"past_values {shape} (context_length {config.context_length} + the largest lag), past_time_features "
                    f"{b}x{past}x{features}, past_observed_mask ones{statics}; future_values and future_time_features of "
                    f"prediction_length {future}")
