"""Builders: a config in, the library's real model on the meta device out (never weights)."""

from __future__ import annotations

from estimator.build.dtypes import TORCH_DTYPES, torch_dtype
from estimator.build.timm_models import build_timm
from estimator.build.transformers_models import build_transformers, transformers_config

__all__ = ["TORCH_DTYPES", "build_timm", "build_transformers", "torch_dtype", "transformers_config"]
