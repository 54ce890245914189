"""``estimate-memory sweep``: ``estimator.estimate()`` over many models on Ray, into a Parquet dataset.

A front over the core, beside ``estimator/cli.py`` and ``estimator_app/``: it calls
:func:`estimator.estimate` and nothing deeper, so a sweep row is by construction the single
answer for the same options. Ray is imported only in :mod:`estimator_sweep.engine` (and only
when a sweep runs); pyarrow only where parts are written or read. docs/sweep.md describes it.

>>> from estimator_sweep import Grid, sweep  # doctest: +SKIP
>>> sweep(["gpt2", "./my-model"], out="fits", grid=Grid(modes=("load", "inference"), gpus=("L4",)))  # doctest: +SKIP
"""

from __future__ import annotations

from estimator_sweep.grid import Grid, Scenario
from estimator_sweep.run import SweepReport, sweep
from estimator_sweep.store import read_dataset
from estimator_sweep.task import Limits

__all__ = ["Grid", "Limits", "Scenario", "SweepReport", "read_dataset", "sweep"]
