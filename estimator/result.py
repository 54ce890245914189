"""The value every estimate returns: :class:`Estimate`, a frozen tuple of :class:`Row`.

``Estimate.to_dict()`` is exactly the JSON of the public contract (schema ``estimator/v1``,
see ``docs/CONTRACT.md``); ``to_dataframe()`` is the same rows as a pandas DataFrame with
exact byte counts (rendering to KiB/MiB/GiB happens in :mod:`estimator.report`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from estimator.options import DType, Mode

if TYPE_CHECKING:
    import pandas as pd

SCHEMA = "estimator/v1"

Method = Literal["exact", "stored", "simulated", "formula"]
Source = Literal["hub", "local", "catalog", "module"]


def accelerate_training(float32_bytes: int, dtype: DType) -> int | None:
    """accelerate 1.15's "Training using Adam" for a model of ``float32_bytes`` in ``dtype``: the largest of its
    ``estimate_training_usage`` parts (``accelerate/commands/estimate.py``): float32 4x (model, gradients, two Adam
    states, each float32), float16/bfloat16 2x (its optimizer states: two float32 copies); None for the others (its N/A).
    Unlike ``training_adam_bytes`` it is one figure of the float32 size whatever the row keeps (no 16-bit weights and
    gradients beside the float32 master weights); tests/test_cli_words.py checks it against accelerate's own function."""
    if dtype is DType.FLOAT32:
        return 4 * float32_bytes
    if dtype in (DType.FLOAT16, DType.BFLOAT16):
        return 2 * float32_bytes
    return None


@dataclass(frozen=True)
class Row:
    """One dtype's figures. ``None`` means "could not be computed"; ``notes`` says why.

    ``dtype`` is a :class:`~estimator.options.DType` (a str enum, so ``row.dtype == "float32"``
    holds); only a GGUF file's quantization name (``Q4_K_M``) stays a plain string.
    """

    dtype: DType | str
    total_bytes: int | None
    largest_layer_bytes: int | None
    training_adam_bytes: int | None
    method: Method
    peak_bytes: int | None = None
    components: dict[str, int] = field(default_factory=dict)
    runtime_overhead: dict[str, int] | None = None
    notes: tuple[str, ...] = ()
    # with a GPU (--gpu / --gpu-memory): whether this row fits it, and the largest batch and
    # context that do (estimator.fit.plan); None without one
    fit: dict[str, Any] | None = None
    offload: dict[str, int] | None = None  # GGUF inference with a GPU or n_gpu_layers: llama.cpp's layer split
    serving: dict[str, Any] | None = None  # mode "serving": the vLLM-style plan (estimator.serving.plan.ServingPlan.to_dict)
    cpu_bytes: int | None = None  # several GPUs with ZeRO offload: host memory per node (docs/parallel.md)
    # training: the peak of a hand-written loop that keeps the model's outputs alive through
    # backward() and the optimizer step (peak_bytes is the loop that keeps only the loss); else None
    outputs_kept_bytes: int | None = None
    # GGUF inference rows: what the row was computed from (an estimator.gguf.placement.Plan), so that every GPU's
    # verdict follows llama.cpp's offload plan (estimator.fit.table); not part of the JSON
    gguf_plan: Any = field(default=None, compare=False, repr=False)
    speed: dict[str, Any] | None = None  # GGUF inference on a named GPU or Mac: llama.cpp's speed (estimator.speed.llamacpp.answer)
    # transformers rows with --gpu naming known hardware: the traced per-op costs the speed came from (an
    # estimator.speed.transformers_speed.RowCosts), so that every GPU's speed follows from them (estimator.fit.table); not JSON
    speed_costs: Any = field(default=None, compare=False, repr=False)
    # the model's bytes loaded in float32 where the row's producer knows them (accelerate's basis), else None
    float32_bytes: int | None = field(default=None, repr=False)
    # how the weights are held when that is not what ``dtype`` says: a pre-quantized checkpoint's float rows keep its
    # quantized tensors as stored ("fp8 as stored: F8_E4M3"); else None
    weights_held: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.dtype, DType) and self.dtype in {d.value for d in DType}:
            object.__setattr__(self, "dtype", DType(self.dtype))
        if self.peak_bytes is not None and self.components and sum(self.components.values()) != self.peak_bytes:
            raise ValueError(f"components of the {self.dtype} row do not add up to peak_bytes")

    @property
    def accelerate_training_bytes(self) -> int | None:
        """``accelerate estimate-memory``'s "Training using Adam" figure for this row's bytes, for those comparing:
        :func:`accelerate_training` of the model's float32 bytes, from which accelerate derives every row (a float32
        row's total; a float16 or bfloat16 row's ``float32_bytes``, where its producer gives them). ``None`` where
        accelerate prints N/A (int8, int4) or has no such row (float8, GGUF files), or the float32 bytes are not known."""
        basis = self.total_bytes if self.dtype is DType.FLOAT32 else self.float32_bytes
        if basis is None or self.dtype not in (DType.FLOAT32, DType.FLOAT16, DType.BFLOAT16):
            return None
        return accelerate_training(basis, DType(self.dtype))

    def to_dict(self) -> dict[str, Any]:
        out = {
            "dtype": str(self.dtype),
            "total_bytes": self.total_bytes,
            "largest_layer_bytes": self.largest_layer_bytes,
            "training_adam_bytes": self.training_adam_bytes,
            "accelerate_training_bytes": self.accelerate_training_bytes,
            "peak_bytes": self.peak_bytes,
            "components": dict(self.components),
            "runtime_overhead": None if self.runtime_overhead is None else dict(self.runtime_overhead),
            "cpu_bytes": self.cpu_bytes,
            "outputs_kept_bytes": self.outputs_kept_bytes,
            "weights_held": self.weights_held,
            "method": self.method,
            "notes": list(self.notes),
            "fit": None if self.fit is None else dict(self.fit),
        }
        if self.offload is not None:  # only GGUF rows with a GPU split carry it (docs/CONTRACT.md)
            out["offload"] = dict(self.offload)
        if self.serving is not None:  # only mode "serving" rows carry it (docs/CONTRACT.md)
            out["serving"] = dict(self.serving)
        if self.speed is not None:  # only rows with a speed answer carry it (docs/CONTRACT.md, docs/speed.md)
            out["speed"] = dict(self.speed)
        return out


@dataclass(frozen=True)
class Estimate:
    """The whole answer for one model and one set of options."""

    model: str
    library: str  # an estimator.options.Library value, or "torch" (estimate_module) / "gguf" (GGUF repos)
    source: Source
    mode: Mode
    rows: tuple[Row, ...]
    options: dict[str, Any] = field(default_factory=dict)
    revision: str | None = None
    architecture: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "mode", Mode.parse(self.mode, option="mode"))

    def row(self, dtype: str) -> Row:
        """The row for ``dtype`` (``KeyError`` if it was not asked for)."""
        for row in self.rows:
            if row.dtype == dtype:
                return row
        raise KeyError(dtype)

    def to_dict(self) -> dict[str, Any]:
        """The contract's JSON object (schema ``estimator/v1``)."""
        return {
            "schema": SCHEMA,
            "model": self.model,
            "revision": self.revision,
            "library": self.library,
            "architecture": self.architecture,
            "source": self.source,
            "mode": self.mode.value,
            "options": dict(self.options),
            "rows": [row.to_dict() for row in self.rows],
        }

    def to_dataframe(self) -> pd.DataFrame:
        """One line per dtype, exact integers (nullable ``Int64`` where a value may be missing)."""
        import pandas as pd

        records = []
        for row in self.rows:
            record: dict[str, Any] = {
                "dtype": str(row.dtype),
                "largest_layer_bytes": row.largest_layer_bytes,
                "total_bytes": row.total_bytes,
                "training_adam_bytes": row.training_adam_bytes,
                "accelerate_training_bytes": row.accelerate_training_bytes,
                "peak_bytes": row.peak_bytes,
            }
            if row.cpu_bytes is not None:
                record["cpu_bytes"] = row.cpu_bytes
            if row.outputs_kept_bytes is not None:
                record["outputs_kept_bytes"] = row.outputs_kept_bytes
            for key, value in row.components.items():
                record[f"component_{key}"] = value
            if row.fit is not None:  # with a GPU: the verdict and the largest batch / sequence
                record.update(fit_gpu=row.fit["gpu"], fit_needed_bytes=row.fit["needed_bytes"], fits=row.fit["fits"],
                              max_batch_size=row.fit["max_batch_size"], max_seq_len=row.fit["max_seq_len"])
            for key, value in (row.serving or {}).items():  # mode "serving": the plan, one column per figure
                record[f"serving_{key}"] = value
            for key, value in (row.speed or {}).items():  # a speed answer: its scalar figures, one column each
                if not isinstance(value, dict):
                    record[f"speed_{key}"] = value
            record["method"] = row.method
            record["notes"] = "; ".join(row.notes)
            records.append(record)
        frame = pd.DataFrame.from_records(records)
        for column in frame.columns:
            if column.endswith("_bytes") or column.startswith("component_") or column in ("max_batch_size", "max_seq_len"):
                frame[column] = frame[column].astype("Int64")
            elif column.startswith("serving_"):  # counts stay integers beside rows without a plan
                values = [v for row in self.rows if row.serving for v in [row.serving.get(column[len("serving_"):])]]
                if values and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
                    frame[column] = frame[column].astype("Int64")
        return frame
