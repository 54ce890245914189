"""The inputs and loss a real run of each kind of model would use: :func:`workload_for`.

The input providers are asked first (:mod:`estimator.peak.inputs.vision.pair_more` and :mod:`estimator.peak.inputs.vision.pair`: a text and an image tower, boxes;
:mod:`estimator.peak.inputs.vision.sam`: the SAM family; :mod:`estimator.peak.inputs.vision.more_models`: DepthPro, Mask2Former, OneFormer,
Grounding DINO, EfficientLoFTR; :mod:`estimator.peak.inputs.vision.models`: detectors, towers asked alone; :mod:`estimator.peak.inputs.other.workloads`:
codecs, text-to-speech, time series; :mod:`estimator.peak.inputs.other.series`: the time-series transformers;
:mod:`estimator.peak.inputs.other.encoders`: Longformer, GLM-Image's VQ-VAE; :mod:`estimator.peak.inputs.other.protein`: Evolla's protein and
text), then the generic paths of :mod:`estimator.peak.inputs.generic` (token ids,
images, video, patch towers, time series). The providers import from
:mod:`~estimator.peak.inputs.generic`, never from here, so the import graph keeps one direction.
"""

from __future__ import annotations

from torch import nn

from estimator.peak.inputs import generic, routing
from estimator.peak.inputs.other import encoders, protein, series, workloads
from estimator.peak.inputs.vision import models, more_models, pair, pair_more, sam
from estimator.peak.workload import Workload

__all__ = ["workload_for"]


def workload_for(
    model: nn.Module,
    *,
    batch_size: int = 1,
    seq_len: int = 512,
    image_size: int | None = None,
) -> Workload:
    """The workload a real run of ``model`` would do: the first input provider that knows the model, else the
    generic paths; with the routing assumption of :mod:`estimator.peak.inputs.routing` where the model's router asks its values."""
    for provider in (pair_more.workload, pair.workload, sam.workload, more_models.workload, models.workload, workloads.workload,
                     series.workload, encoders.workload, protein.workload):
        found = provider(model, batch_size=batch_size, seq_len=seq_len, image_size=image_size)
        if found is not None:
            return routing.assumed(model, found)
    return routing.assumed(model, generic.workload_for(model, batch_size=batch_size, seq_len=seq_len, image_size=image_size))
