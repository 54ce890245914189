"""The inputs and loss a real run of each kind of model would use: :func:`workload_for`.

The input providers of :data:`estimator.peak.inputs.registry.PROVIDERS` are asked first, in their order (a text and an
image tower, boxes; the SAM family; DepthPro, Mask2Former, OneFormer, Grounding DINO, EfficientLoFTR; detectors and towers
asked alone; codecs, text-to-speech, time series; Longformer, GLM-Image's VQ-VAE; Evolla's protein and text), then the
generic paths of :mod:`estimator.peak.inputs.generic` (token ids, images, video, patch towers, time series). The providers
import from :mod:`~estimator.peak.inputs.generic`, never from here, so the import graph keeps one direction.
"""

from __future__ import annotations

from torch import nn

from estimator.peak.inputs import generic, routing
from estimator.peak.inputs.registry import provider_functions
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
    for provider in provider_functions():  # the ordered providers of estimator.peak.inputs.registry
        found = provider(model, batch_size=batch_size, seq_len=seq_len, image_size=image_size)
        if found is not None:
            return routing.assumed(model, found)
    return routing.assumed(model, generic.generic_workload(model, batch_size=batch_size, seq_len=seq_len, image_size=image_size))
