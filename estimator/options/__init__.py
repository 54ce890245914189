"""The closed vocabularies of the estimator, parsed once at the boundary.

Every option the CLI, the app and the Python API accept is one of these enums; parsing
raises :class:`~estimator.errors.BadOptionError` whose ``option`` field names the option (worded
by each adapter) and whose message lists the accepted values.

The request is built from them here too, once, by :func:`parse_options`: an :class:`Options` made
of a few small typed values, each handed only to the stage it shapes — :class:`LoadSpec` (what to
load: library, dtypes, whether a repo's code may run) to the source, build and load stages;
:class:`WorkSpec` (mode, :class:`InputShape`, :class:`TrainingSpec`) to the peak stage;
:class:`HardwareSpec` (device, GPU) to the peak and fit stages. Combinations this version cannot
answer are refused here, before any work (:func:`check_supported`).

The package is split by what each part holds: ``vocab`` (the enums and single-value parsers),
``specs`` (the request's dataclasses) and ``parse`` (:func:`parse_options`, :func:`check_supported`).
Every public name is re-exported here, so ``from estimator.options import X`` keeps working.
"""

from __future__ import annotations

from estimator.options.parse import check_supported, parse_options
from estimator.options.specs import (
    DEFAULT_SEQ_LEN,
    GGUFSpec,
    HardwareSpec,
    InputShape,
    LoadSpec,
    Options,
    ParallelSpec,
    ServingSpec,
    TrainingSpec,
    WorkSpec,
)
from estimator.options.vocab import (
    BNB_COMPUTE_DTYPES,
    CACHE_TYPES,
    DEFAULT_DTYPES,
    DTYPE_ALIASES,
    AttnImplementation,
    Component,
    Device,
    DType,
    FlashAttn,
    KVCacheDType,
    Library,
    Mode,
    Offload,
    Optimizer,
    OutputFormat,
    ServingQuantization,
    Strategy,
    VLLMVersion,
    parse_bnb_compute_dtype,
    parse_cache_type,
    parse_dtypes,
    parse_fraction,
    positive_int,
    seconds,
)

__all__ = [
    "AttnImplementation", "BNB_COMPUTE_DTYPES", "CACHE_TYPES", "DEFAULT_DTYPES", "DEFAULT_SEQ_LEN", "DTYPE_ALIASES", "Component", "DType", "Device", "FlashAttn", "GGUFSpec",
    "HardwareSpec", "InputShape", "KVCacheDType", "Library", "LoadSpec", "Mode", "Offload", "Optimizer", "Options", "OutputFormat",
    "ParallelSpec", "ServingQuantization", "ServingSpec", "Strategy", "TrainingSpec", "VLLMVersion", "WorkSpec", "check_supported", "parse_bnb_compute_dtype",
    "parse_cache_type", "parse_dtypes", "parse_fraction", "parse_options", "positive_int", "seconds",
]
