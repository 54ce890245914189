"""Model Memory Estimator: how much memory a model needs to load, run and train, without weights.

>>> from estimator import estimate
>>> result = estimate("meta-llama/Llama-3.1-8B", dtypes=["bfloat16"])  # doctest: +SKIP
>>> result.row("bfloat16").total_bytes  # doctest: +SKIP
16060522496

The core never prints and imports torch only when it has to build a model.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from estimator.api import clear_cache, estimate
from estimator.errors import (
    AbsurdSizeError,
    BadOptionError,
    BadReferenceError,
    EstimatorError,
    GatedModelError,
    HubError,
    HubRateLimitedError,
    HubTimeoutError,
    InputError,
    LibraryMissingError,
    MalformedConfigError,
    ModelNotFoundError,
    NoConfigError,
    RemoteCodeRequiredError,
    RevisionNotFoundError,
    UnknownArchitectureError,
    UnsupportedError,
)
from estimator.options import Component, Device, DType, Library, Mode, Optimizer
from estimator.result import SCHEMA, Estimate, Row

if TYPE_CHECKING:
    from estimator_sweep.run import SweepReport

__version__ = "0.1.0"

# These three need torch at import; they load on first use so `import estimator` stays light
# (the CLI answers a safetensors repo without importing torch at all).
_LAZY = {"estimate_module": "estimator.modules.estimate", "summarize": "estimator.modules.summary", "MemTracker": "estimator.modules.tracker"}


def sweep(references: Iterable[str], **kwargs: Any) -> SweepReport:
    """``estimate()`` over many models on Ray into a Parquet dataset: :func:`estimator_sweep.sweep` (docs/sweep.md)."""
    from estimator_sweep.run import sweep as run_sweep

    return run_sweep(references, **kwargs)


def __getattr__(name: str) -> object:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'estimator' has no attribute {name!r}")


__all__ = [
    "SCHEMA",
    "AbsurdSizeError",
    "BadOptionError",
    "BadReferenceError",
    "Component",
    "DType",
    "Device",
    "Estimate",
    "EstimatorError",
    "GatedModelError",
    "HubError",
    "HubRateLimitedError",
    "HubTimeoutError",
    "InputError",
    "Library",
    "LibraryMissingError",
    "MalformedConfigError",
    "MemTracker",
    "Mode",
    "ModelNotFoundError",
    "NoConfigError",
    "Optimizer",
    "RemoteCodeRequiredError",
    "RevisionNotFoundError",
    "Row",
    "UnknownArchitectureError",
    "UnsupportedError",
    "__version__",
    "clear_cache",
    "estimate",
    "estimate_module",
    "summarize",
    "sweep",
]
