"""timm models on the meta device, the way ``timm.create_model("hf-hub:...")`` reads a timm config.

A timm repo's config.json holds ``architecture``, ``num_classes``, ``pretrained_cfg`` and optional
``model_args``. Some timm models compute values with real tensors while they are built (ConvNeXt's
drop-path rates), so parameters go to meta with accelerate's ``init_empty_weights`` (buffers are
made on the CPU, where they are small) and everything is then moved to meta and cast like
``model.to(dtype)``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from estimator.errors import LibraryMissingError, MalformedConfigError, UnknownArchitectureError


def build_timm(config: dict[str, Any], dtype: torch.dtype, *, model: str) -> nn.Module:
    try:
        import timm
    except ImportError:
        raise LibraryMissingError("timm is not installed; `pip install timm` to estimate timm models.") from None
    from accelerate import init_empty_weights

    architecture = config.get("architecture")
    if not isinstance(architecture, str):
        raise MalformedConfigError(f"The timm config of {model} has no 'architecture' string.")
    if not timm.is_model(architecture.split(".")[0]):
        raise UnknownArchitectureError(f"timm {timm.__version__} has no model {architecture!r} ({model}).")
    kwargs: dict[str, Any] = dict(config.get("model_args") or {})
    pretrained_cfg = dict(config.get("pretrained_cfg") or {})
    if "num_classes" in config:
        kwargs["num_classes"] = config["num_classes"]
        pretrained_cfg["num_classes"] = config["num_classes"]
    if "global_pool" in config and "global_pool" not in kwargs:
        kwargs["global_pool"] = config["global_pool"]
    try:
        with init_empty_weights():
            built = timm.create_model(architecture, pretrained=False, pretrained_cfg=pretrained_cfg or None, **kwargs)
    except (TypeError, ValueError, KeyError, RuntimeError, AssertionError) as exc:
        from estimator.build.rejections import refusal

        raise MalformedConfigError(f"timm could not build {architecture} from the config of {model}: {refusal(exc, config)}") from None
    return built.to(device="meta", dtype=dtype)
