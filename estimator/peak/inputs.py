"""The inputs and loss a real run of each kind of model would use: :func:`workload_for`.

The input providers are asked first (:mod:`estimator.peak.pair_more` and :mod:`estimator.peak.pair_inputs`: a text and an image tower, boxes;
:mod:`estimator.peak.sam_inputs`: the SAM family; :mod:`estimator.peak.vision_more`: DepthPro, Mask2Former, OneFormer,
Grounding DINO, EfficientLoFTR; :mod:`estimator.peak.vision_inputs`: detectors, towers asked alone; :mod:`estimator.peak.other_inputs`:
codecs, text-to-speech, time series; :mod:`estimator.peak.series_inputs`: the time-series transformers;
:mod:`estimator.peak.encoder_inputs`: Longformer, GLM-Image's VQ-VAE; :mod:`estimator.peak.protein_inputs`: Evolla's protein and
text), then the generic paths of :mod:`estimator.peak.basic_inputs` (token ids,
images, video, patch towers, time series), whose names this module re-exports. The providers import from
:mod:`~estimator.peak.basic_inputs`, never from here, so the import graph keeps one direction.
"""

from __future__ import annotations

from torch import nn

from estimator.peak import (
    basic_inputs,
    encoder_inputs,
    other_inputs,
    pair_inputs,
    pair_more,
    protein_inputs,
    routing,
    sam_inputs,
    series_inputs,
    vision_inputs,
    vision_more,
)
from estimator.peak.basic_inputs import (  # noqa: F401 - the names this module always had
    ModelKind,
    Workload,
    _accepts,
    _forward_all,
    _frames,
    _image_shape,
    _in_seq2seq_mapping,
    _is_timm,
    _known_ids,
    _num_labels,
    detect_kind,
    first_tensor,
    generate_kwargs,
    make_input,
    module_workload,
    ordinary_token,
    prefill_kwargs,
)

__all__ = ["ModelKind", "Workload", "detect_kind", "first_tensor", "generate_kwargs", "make_input", "module_workload", "prefill_kwargs",
           "workload_for"]


def workload_for(
    model: nn.Module,
    *,
    batch_size: int = 1,
    seq_len: int = 512,
    image_size: int | None = None,
) -> Workload:
    """The workload a real run of ``model`` would do: the first input provider that knows the model, else the
    generic paths; with the routing assumption of :mod:`estimator.peak.routing` where the model's router asks its values."""
    for provider in (pair_more.workload, pair_inputs.workload, sam_inputs.workload, vision_more.workload, vision_inputs.workload, other_inputs.workload,
                     series_inputs.workload, encoder_inputs.workload, protein_inputs.workload):
        found = provider(model, batch_size=batch_size, seq_len=seq_len, image_size=image_size)
        if found is not None:
            return routing.assumed(model, found)
    return routing.assumed(model, basic_inputs.workload_for(model, batch_size=batch_size, seq_len=seq_len, image_size=image_size))
