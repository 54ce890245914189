"""A sweep's rows: plain dicts in the dataset's schema (docs/CONTRACT.md, "Sweep"), made from an
:class:`~estimator.result.Estimate` or from an error, and the app's share-link query for each.

The schema is fixed here, once, so every part file has the same columns and types whatever its
rows hold (a part of failures only still has ``peak_bytes: int64``).
"""

from __future__ import annotations

import datetime as dt
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from estimator_sweep.grid import Grid, Scenario

if TYPE_CHECKING:
    import pyarrow as pa

    from estimator.result import Estimate, Row

# (column, Arrow type name, nullable); the order of docs/CONTRACT.md
COLUMNS: tuple[tuple[str, str, bool], ...] = (
    ("reference", "string", False),
    ("model", "string", False),
    ("revision", "string", True),
    ("source", "string", True),
    ("library", "string", True),
    ("architecture", "string", True),
    ("dtype", "string", False),
    ("mode", "string", False),
    ("batch_size", "int64", True),
    ("seq_len", "int64", True),
    ("max_new_tokens", "int64", True),
    ("optimizer", "string", True),
    ("lora_rank", "int64", True),
    ("gradient_checkpointing", "bool", True),
    ("pure_16bit", "bool", True),
    ("device", "string", False),
    ("gpu", "string", True),
    ("gpu_memory_bytes", "int64", True),
    ("total_bytes", "int64", True),
    ("largest_layer_bytes", "int64", True),
    ("training_adam_bytes", "int64", True),
    ("peak_bytes", "int64", True),
    ("needed_bytes", "int64", True),
    ("fits", "bool", True),
    ("max_batch", "int64", True),
    ("max_seq", "int64", True),
    ("method", "string", True),
    ("notes", "string", False),
    ("error", "string", True),
    ("error_kind", "string", True),
    ("share_query", "string", False),
    ("estimator_version", "string", False),
    ("task", "string", False),
    ("seconds", "float64", False),
    ("computed_at", "timestamp", False),
    # the row's speed answer with a GPU named (rows[].speed; docs/speed.md): appended, older parts read them as null
    ("speed_label", "string", True),
    ("time_to_first_token_s", "float64", True),
    ("prefill_tokens_per_second", "float64", True),
    ("decode_tokens_per_second", "float64", True),
    ("train_tokens_per_second", "float64", True),
    ("model_flops_utilization", "float64", True),
)
SPEED_COLUMNS = ("time_to_first_token_s", "prefill_tokens_per_second", "decode_tokens_per_second", "train_tokens_per_second",
                 "model_flops_utilization")
ERROR_KINDS = ("refused", "hub", "limit", "bug")
TRANSIENT = ("hub", "limit")  # kinds a rerun recomputes


def schema() -> pa.Schema:
    """The dataset's Arrow schema."""
    import pyarrow as pa

    types = {"string": pa.string(), "int64": pa.int64(), "bool": pa.bool_(), "float64": pa.float64(), "timestamp": pa.timestamp("us", tz="UTC")}
    return pa.schema([pa.field(name, types[kind], nullable=nullable) for name, kind, nullable in COLUMNS])


def estimator_version() -> str:
    """The installed estimator's version (``estimator.__version__``, from the package metadata)."""
    try:
        return version("model-memory-estimator")
    except PackageNotFoundError:  # a source tree that was never installed; pip install -e . fixes it
        return "unknown"


def _scenario_columns(scenario: Scenario) -> dict[str, Any]:
    return {"mode": scenario.mode, "batch_size": scenario.batch_size, "seq_len": scenario.seq_len,
            "max_new_tokens": scenario.max_new_tokens, "optimizer": scenario.optimizer, "lora_rank": scenario.lora_rank,
            "gradient_checkpointing": scenario.gradient_checkpointing, "pure_16bit": scenario.pure_16bit, "device": scenario.device,
            "gpu": scenario.gpu_label}


def share_query(model: str, revision: str | None, grid: Grid, scenario: Scenario, dtype: str, gpu_name: str | None) -> str:
    """The app's share-link query for one row: every parameter of CONTRACT's "Share links", in its order.

    Spelled as the app's own ``estimator_app.form.to_query`` spells a form holding these values
    (tested against it); built here because the app's stage is above the sweep's. A GGUF row's
    quantization goes to ``gguf_file`` (the page's dtypes are float and integer widths only).
    """
    gguf = dtype not in ("float32", "float16", "bfloat16", "float8", "int8", "int4")
    dtypes = ",".join(grid.row_dtypes) if gguf else dtype
    params: list[tuple[str, str]] = [
        ("model", model), ("revision", revision or "main"), ("library", grid.library), ("dtypes", dtypes), ("mode", scenario.mode),
        ("batch", str(scenario.batch_size or 1)), ("seq", "auto" if scenario.seq_len is None else str(scenario.seq_len)),
        ("image", "auto"), ("new_tokens", str(scenario.max_new_tokens or 0)), ("device", scenario.device),
        ("optimizer", scenario.optimizer or "adamw"), ("pure16", "1" if scenario.pure_16bit else "0"),
        ("checkpointing", "1" if scenario.gradient_checkpointing else "0"),
        ("lora", "none" if scenario.lora_rank is None else str(scenario.lora_rank)), ("lora_targets", ""),
        ("gpu", gpu_name or "none"), ("gpu_memory", scenario.gpu_memory or "none"), ("ctx", "auto"), ("cache_type", "f16"),
        ("n_gpu_layers", "auto"), ("gguf_file", dtype if gguf else ""), ("gpu_memory_utilization", "0.9"), ("max_model_len", "auto"),
        ("max_num_seqs", "auto"), ("max_num_batched_tokens", "auto"), ("kv_cache_dtype", "auto"), ("block_size", "16"),
        ("gpus", "1"), ("nodes", "1"), ("strategy", "none"), ("offload", "none"),
    ]
    return urlencode(params, safe="/,:")


def _row_figures(row: Row, scenario: Scenario) -> dict[str, Any]:
    fit = row.fit or {}
    serving = row.serving or {}
    capacity = fit.get("capacity_bytes", serving.get("capacity_bytes"))
    fits = fit.get("fits", serving.get("fits"))
    return {"dtype": str(row.dtype), "total_bytes": row.total_bytes, "largest_layer_bytes": row.largest_layer_bytes,
            "training_adam_bytes": row.training_adam_bytes, "peak_bytes": row.peak_bytes, "needed_bytes": fit.get("needed_bytes"),
            "gpu_memory_bytes": capacity, "fits": fits, "max_batch": fit.get("max_batch_size"), "max_seq": fit.get("max_seq_len"),
            "method": row.method, "notes": "; ".join(row.notes), **_speed_figures(row.speed)}


def _speed_figures(speed: dict[str, Any] | None) -> dict[str, Any]:
    """The speed columns of a row (null where the answer has no such figure, or no answer)."""
    speed = speed or {}
    figures = {name: None if speed.get(name) is None else float(speed[name]) for name in SPEED_COLUMNS}
    return {"speed_label": speed.get("label"), **figures}


def estimate_rows(result: Estimate, *, reference: str, grid: Grid, scenario: Scenario, task: str, seconds: float) -> list[dict[str, Any]]:
    """One dataset row per row of ``result`` (one per dtype or GGUF file)."""
    now = dt.datetime.now(dt.timezone.utc)
    rows = []
    for row in result.rows:
        gpu_name = (row.fit or {}).get("gpu") or scenario.gpu
        record = {"reference": reference, "model": result.model, "revision": result.revision, "source": result.source,
                  "library": result.library, "architecture": result.architecture, **_scenario_columns(scenario), **_row_figures(row, scenario),
                  "error": None, "error_kind": None, "estimator_version": estimator_version(), "task": task, "seconds": seconds,
                  "computed_at": now}
        record["share_query"] = share_query(result.model, result.revision, grid, scenario, str(row.dtype), gpu_name)
        rows.append(record)
    return rows


def error_rows(message: str, kind: str, *, reference: str, model: str | None, revision: str | None, source: str | None, grid: Grid,
               scenario: Scenario, dtypes: tuple[str, ...], task: str, seconds: float) -> list[dict[str, Any]]:
    """One row per dtype asked, figures null, ``error`` the message a user would read."""
    assert kind in ERROR_KINDS, kind
    now = dt.datetime.now(dt.timezone.utc)
    name = model or reference
    return [{"reference": reference, "model": name, "revision": revision, "source": source, "library": None, "architecture": None,
             **_scenario_columns(scenario), "dtype": dtype, "gpu_memory_bytes": None, "total_bytes": None, "largest_layer_bytes": None,
             "training_adam_bytes": None, "peak_bytes": None, "needed_bytes": None, "fits": None, "max_batch": None, "max_seq": None,
             "method": None, "notes": "", "error": message, "error_kind": kind, **_speed_figures(None),
             "share_query": share_query(name, revision, grid, scenario, dtype, scenario.gpu), "estimator_version": estimator_version(),
             "task": task, "seconds": seconds, "computed_at": now}
            for dtype in dtypes]
