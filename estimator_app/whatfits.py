""""What fits my GPU?": which models of a sweep dataset fit a GPU, for a use, a dtype and a scenario.

Pure (pandas and pyarrow, no Gradio). The dataset is a sweep's Parquet output (docs/CONTRACT.md,
"Sweep"): one file, a folder of part files, or a Hub dataset repo. :func:`load` reads it once
(cached by path and modification time) and adds two columns of its own: ``use`` (load, inference,
lora, full, serving: what a person picks) and ``scenario`` (the row's options in words: "batch 1 x
2048 tokens, rank 16, adamw"), so a query is a few boolean masks over 100,000 rows.

What "fits" means is the core's (:func:`estimator.fit.runtime.needed_bytes`): the row's
``needed_bytes`` (peak, or weights in load mode, plus the runtime overhead for that GPU) at most the
GPU's ``total_bytes``. A row swept for the GPU asked is taken as it is (``fits``, ``max_batch``,
``max_seq`` are the sweep's); for another GPU or a typed memory size, ``needed_bytes`` of a row of
the same model and scenario is compared with that memory (a non-Hopper row first: its cuBLAS
workspace is the one a typed size assumes), and the largest batch and sequence, which depend on the
GPU, are left empty.

Query parameters of the tab (CONTRACT.md, "Share links"): :data:`PARAMS`.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

if TYPE_CHECKING:
    import pandas as pd

ENV = "ESTIMATOR_SWEEP_DATASET"
SHIPPED = Path(__file__).resolve().parent / "data" / "sweep.parquet"
USES: dict[str, str] = {
    "load": "Load the weights",
    "inference": "Inference (generate at a context)",
    "lora": "LoRA fine-tuning (int4: QLoRA)",
    "full": "Full fine-tuning",
    "serving": "Serving (vLLM)",
}
QLORA = "QLoRA: LoRA adapters over int4 (bitsandbytes NF4) weights"
# ``fits_checkpointing`` came after the first six: a link without it means "either" (the scenario decides)
PARAMS: tuple[str, ...] = ("fits_gpu", "fits_memory", "fits_use", "fits_dtype", "fits_scenario", "fits_filter", "fits_checkpointing")
MEMORY_LABEL = "“Or its memory”"  # the tab's field, as its errors name it
# A row whose own notes say its simulation failed (the formula was used instead) or that the setting is past what the
# model can run (a sequence longer than its positions): never listed as fitting.
UNRUNNABLE = ("simulation failed", "is longer than the model's")
SHOWN = 500  # rows the table shows at most (the count says how many fit)
GiB = 1024**3
SPEED = "Tok/s (roofline)"  # decode (inference) or training tokens/s on the GPU swept, where the row was swept on the GPU asked
COLUMNS = ("Model", "Needed GiB", "Free GiB", "Weights GiB", "Peak GiB", "Max batch", "Max seq", SPEED, "Method", "Library", "Architecture")
# serving rows: vLLM's plan on the GPU swept (its KV cache and how many requests of max model length run at once)
# (numbers where COLUMNS has numbers, so one table widget, its column types set once, shows either)
SERVING_COLUMNS = ("Model", "KV cache tokens", "Requests at once", "Max model len", "Weights GiB", "Max seqs", "Max batched tokens",
                   SPEED, "vLLM starts", "Method", "Architecture")
_READ = ("model", "revision", "library", "architecture", "dtype", "mode", "batch_size", "seq_len", "max_new_tokens", "optimizer",
         "lora_rank", "gradient_checkpointing", "pure_16bit", "device", "gpu", "gpu_memory_bytes", "total_bytes", "peak_bytes",
         "needed_bytes", "fits", "max_batch", "max_seq", "method", "error", "share_query", "notes", "computed_at", "estimator_version",
         "kv_cache_tokens", "max_concurrency", "max_model_len", "max_num_seqs", "max_num_batched_tokens",
         "decode_tokens_per_second", "train_tokens_per_second")
# vLLM's plan in a serving row's notes (a dataset without the plan's columns): "600,288 tokens; maximum concurrency for
# 1,024 tokens per request: 586.22x" and "max_num_seqs 256"
_KV_NOTE = re.compile(r"([\d,]+) tokens; maximum concurrency for ([\d,]+) tokens per request: ([\d.,]+)x")
_SEQS_NOTE = re.compile(r"max_num_seqs ([\d,]+)")
_TOKENS_NOTE = re.compile(r"max_num_batched_tokens ([\d,]+)")


class DatasetError(ValueError):
    """The sweep dataset could not be read (the message says which and what to do)."""


@dataclass(frozen=True)
class Sweep:
    """A sweep dataset as the tab uses it: its rows (with ``use`` and ``scenario``), split once by (use, dtype,
    scenario) so a question reads one part, and where it came from."""

    frame: pd.DataFrame
    source: str
    parts: dict[tuple[str, str, str], pd.DataFrame] = field(default_factory=dict, repr=False)

    def dtypes(self, use: str | None = None) -> list[str]:
        return sorted({d for u, d, _ in self.parts if use is None or u == use}, key=_dtype_order)

    def uses(self) -> list[str]:
        present = {u for u, _, _ in self.parts}
        return [use for use in USES if use in present]

    def scenarios(self, use: str, dtype: str | None = None, checkpointing: bool | None = None) -> list[str]:
        """The scenarios swept for ``use`` (and ``dtype``; with or without gradient checkpointing), smallest first; load and
        serving have one each."""
        import pandas as pd

        found = {s: part.iloc[0] for (u, d, s), part in self.parts.items() if u == use and (not dtype or d == dtype)}
        if checkpointing is not None:
            found = {s: row for s, row in found.items() if bool(row["gradient_checkpointing"] is True) == checkpointing}

        def size(name: str) -> tuple[float, float, float]:
            row = found[name]
            seq, batch, rank = (-1.0 if pd.isna(row[k]) else float(row[k]) for k in ("seq_len", "batch_size", "lora_rank"))
            return seq, batch, rank

        return sorted(found, key=size)

    def gpus(self) -> list[str]:
        return sorted(self.frame["gpu"].dropna().unique().tolist())

    def describe(self) -> str:
        """Which dataset this is, in a sentence: where from, how many models, which GPUs, uses and dtypes, when it was made,
        and how to point the tab at a larger one."""
        frame = self.frame
        where = ("the small sample dataset shipped with the app (estimator_app/data/sweep.parquet)" if self.source == str(SHIPPED)
                 else f"the dataset {self.source}")
        uses = ", ".join(USES[u].split(" (")[0] for u in self.uses())
        made = pd_dates(frame["computed_at"])
        version = sorted({str(v) for v in frame["estimator_version"].dropna().unique()})
        return (f"Showing {where}: {frame['model'].nunique():,} models, {len(frame):,} rows; GPUs swept: {', '.join(self.gpus()) or 'none'}; "
                f"uses: {uses}; dtypes: {', '.join(self.dtypes())}"
                + (f"; made {made}" if made else "") + (f" by estimator {', '.join(version)}" if version else "")
                + f". A model or setting it lacks is not listed: ask it on the first tab. For a larger dataset, build one with "
                f"`estimate-memory sweep` (docs/sweep.md) and set {ENV} to its Parquet file, its folder, or a Hub dataset "
                "ORG/NAME (read with huggingface_hub) before starting the app.")


@dataclass(frozen=True)
class Query:
    """What the tab asks. ``memory`` (a size, ``24GiB``) wins over ``gpu`` (a name of :mod:`estimator.fit.gpus`)."""

    gpu: str | None = "RTX 4090"
    memory: str | None = None
    use: str = "load"
    dtype: str = "bfloat16"
    scenario: str | None = None  # None: the first scenario swept for the use (with ``checkpointing`` as asked)
    filter: str = ""
    checkpointing: bool | None = None  # None: either (the scenario decides); True/False: the training scenarios with/without it


@dataclass(frozen=True)
class Answer:
    """The table (``COLUMNS``; the model cell a Markdown link to its share link), one line saying what it holds,
    and the query as answered (its scenario resolved)."""

    table: pd.DataFrame
    summary: str
    fitting: int
    considered: int
    query: Query


def _dtype_order(dtype: str) -> tuple[int, str]:
    order = ("float32", "float16", "bfloat16", "float8", "int8", "int4")
    return (order.index(dtype), dtype) if dtype in order else (len(order), dtype)


def pd_dates(column: Any) -> str:
    """The first and last date of a timestamp column, ``"2026-11-25"`` or ``"2026-11-20 to 2026-11-25"``; empty without one."""
    import pandas as pd

    stamps = pd.to_datetime(column, errors="coerce", utc=True).dropna()
    if stamps.empty:
        return ""
    first, last = stamps.min().date().isoformat(), stamps.max().date().isoformat()
    return first if first == last else f"{first} to {last}"


def unrunnable(notes: Any) -> bool:
    """Whether a row's notes say its simulation failed or its setting is past what the model can run (:data:`UNRUNNABLE`)."""
    return isinstance(notes, str) and any(words in notes for words in UNRUNNABLE)


def use_of(mode: str, lora_rank: Any) -> str:
    """A row's use: its mode, training split into LoRA (a rank) and full fine-tuning."""
    if mode == "training":
        return "full" if lora_rank is None or lora_rank != lora_rank else "lora"  # NaN: no rank
    return str(mode)


def _scenarios(frame: pd.DataFrame) -> pd.Series:
    """Each row's scenario in words, from its scenario columns (vectorised: one string per distinct combination)."""
    import pandas as pd

    keys = ["mode", "batch_size", "seq_len", "max_new_tokens", "optimizer", "lora_rank", "gradient_checkpointing", "pure_16bit", "device"]
    codes = frame[keys].astype(object).groupby(keys, dropna=False, sort=False).ngroup()
    firsts = frame.loc[~codes.duplicated(), keys]
    words = {code: scenario_words(row) for code, row in zip(codes[firsts.index], firsts.to_dict("records"), strict=True)}
    return pd.Series(codes.map(words), index=frame.index, dtype="string")


def scenario_words(row: Mapping[str, Any]) -> str:
    """``{"mode": "training", "batch_size": 1, "seq_len": 2048, "lora_rank": 16, ...}`` -> ``"batch 1 x 2048 tokens, rank 16, adamw"``."""

    def given(key: str) -> Any:
        value = row.get(key)
        return None if value is None or value != value else value  # NaN: not given

    mode = row.get("mode")
    if mode in ("load", "serving"):
        return "the weights" if mode == "load" else "vLLM's defaults"
    seq = given("seq_len")
    parts = [f"batch {int(given('batch_size') or 1)} x {int(seq) if seq is not None else 'default'} tokens"]
    if given("max_new_tokens"):
        parts.append(f"{int(row['max_new_tokens'])} new tokens")
    if mode == "training":
        if given("lora_rank") is not None:
            parts.append(f"rank {int(row['lora_rank'])}")
        parts.append(str(given("optimizer") or "adamw"))
        if given("gradient_checkpointing"):
            parts.append("checkpointing")
        if given("pure_16bit"):
            parts.append("pure 16-bit")
    if row.get("device") == "cpu":
        parts.append("cpu")
    return ", ".join(parts)


def source_from_env(environ: Mapping[str, str] | None = None) -> str:
    """Where the dataset is: ``ESTIMATOR_SWEEP_DATASET`` (a Parquet file, a sweep's folder, or a Hub dataset
    ``ORG/NAME``), else the one shipped with the app."""
    environ = os.environ if environ is None else environ
    return environ.get(ENV, "").strip() or str(SHIPPED)


def _local_files(source: str) -> Path:
    path = Path(source).expanduser()
    if path.exists():
        return path
    if "/" in source and not source.startswith((".", "/", "~")) and source.count("/") == 1:
        return _hub_folder(source)
    raise DatasetError(f"The sweep dataset {source!r} does not exist; set {ENV} to a Parquet file, a sweep's folder or a Hub dataset ORG/NAME.")


@functools.lru_cache(maxsize=4)
def _hub_folder(repo_id: str) -> Path:
    """The Hub dataset's Parquet files, downloaded once per process (a restart reads a newer revision)."""
    from huggingface_hub import snapshot_download

    try:
        folder = snapshot_download(repo_id, repo_type="dataset", allow_patterns=["*.parquet", "**/*.parquet"])
    except Exception as exc:  # noqa: BLE001 - any Hub failure is the same advice to the person who set the variable
        raise DatasetError(f"Could not download the sweep dataset {repo_id!r} from the Hub ({type(exc).__name__}); "
                           f"check {ENV} (a Parquet file, a sweep's folder or a Hub dataset ORG/NAME).") from None
    return Path(folder)


def load(source: str) -> Sweep:
    """The dataset at ``source`` (see :func:`source_from_env`), read once per path and modification time."""
    path = _local_files(source)
    return _read(str(path), path.stat().st_mtime_ns, source)


@functools.lru_cache(maxsize=4)
def _read(path: str, mtime: int, source: str) -> Sweep:
    import pandas as pd
    import pyarrow.dataset as ds

    folder = Path(path)
    if folder.is_dir() and (folder / "data").is_dir():
        folder = folder / "data"
    try:
        dataset = ds.dataset(str(folder), format="parquet")
        names = [name for name in _READ if name in dataset.schema.names]
        frame = dataset.to_table(columns=names).to_pandas()
    except (OSError, ValueError) as exc:
        raise DatasetError(f"Could not read the sweep dataset {source!r}: {exc}") from None
    missing = {"model", "dtype", "mode", "needed_bytes", "share_query"} - set(frame.columns)
    if missing:
        raise DatasetError(f"The sweep dataset {source!r} lacks the columns {', '.join(sorted(missing))} (docs/CONTRACT.md, 'Sweep').")
    for name in _READ:
        if name not in frame.columns:
            frame[name] = None
    frame["use"] = [use_of(m, r) for m, r in zip(frame["mode"], frame["lora_rank"], strict=True)]
    frame["scenario"] = _scenarios(frame)
    frame = frame.reset_index(drop=True)
    for name in ("needed_bytes", "total_bytes", "peak_bytes", "gpu_memory_bytes"):
        frame[name] = pd.to_numeric(frame[name], errors="coerce").astype("float64")  # exact below 2**53 bytes (8 PiB)
    frame["fits"] = frame["fits"].astype("boolean")
    hopper = frame["gpu"].astype("string").str.contains("H100|H200|H20|GH200", na=False, regex=True)
    frame["_hopper"] = hopper.astype(bool)
    parts = {(str(u), str(d), str(s)): part.reset_index(drop=True)
             for (u, d, s), part in frame.groupby(["use", "dtype", "scenario"], observed=True, sort=False, dropna=True)}
    return Sweep(frame=frame, source=source, parts=parts)


def capacity(query: Query) -> tuple[int, str]:
    """The memory asked (bytes) and its name; ``ValueError`` with the page's words for an unknown GPU or size."""
    from estimator.errors import BadOptionError
    from estimator.fit.gpus import find_gpu, parse_memory

    try:
        if query.memory:
            return parse_memory(query.memory), query.memory
        if not query.gpu:
            raise ValueError("Pick a GPU or type its memory (e.g. 24GiB).")
        gpu = find_gpu(query.gpu)
        return gpu.total_bytes, gpu.name
    except BadOptionError as exc:  # in the tab's words: its fields, not the command line's flags
        if exc.option == "gpu_memory":
            raise ValueError(f"{MEMORY_LABEL} must be a size between 1 MiB and 1 PiB such as 24GiB, 80GB or 16384MiB "
                             f"(GiB = 1024³ bytes, GB = 10⁹); got {str(query.memory)[:40]!r}.") from None
        raise ValueError(f"“GPU” {str(query.gpu)[:40]!r} is not a GPU we know: pick one from the list, or type its memory "
                         f"in {MEMORY_LABEL}.") from None


def answer(sweep: Sweep, query: Query, limit: int = SHOWN) -> Answer:
    """The models of ``sweep`` that fit ``query``'s GPU, the largest first (at most ``limit`` rows shown)."""
    import pandas as pd

    total, name = capacity(query)
    scenario = query.scenario or next(iter(sweep.scenarios(query.use, query.dtype, query.checkpointing)), None)
    chosen = sweep.parts.get((query.use, query.dtype, scenario or ""))
    if chosen is None:
        chosen = sweep.frame.iloc[:0]
    exact = (chosen["gpu"] == name).to_numpy()
    if not query.memory and exact.any():
        chosen = chosen[exact]
    failed = chosen["error"].notna().to_numpy()
    n_failed = len(set(chosen.loc[failed, "model"]) - set(chosen.loc[~failed, "model"]))  # no answer at all for this question
    chosen = chosen[~failed]
    # a figure from a failed simulation, or for a setting the model cannot run, is no "fits": left out, and counted
    cannot = chosen["notes"].map(unrunnable).to_numpy(dtype=bool)
    not_run = sorted(set(chosen.loc[cannot, "model"]))
    chosen = chosen[~cannot]
    if not query.memory and exact.any():  # the sweep's own answer for this GPU
        known = (chosen["fits"].notna() | chosen["needed_bytes"].notna()).to_numpy()
        n_unknown = int(chosen.loc[~known, "model"].nunique())
        chosen = chosen[known]
        fits = chosen["fits"].fillna(chosen["needed_bytes"] <= total).fillna(False)
    else:  # another GPU's rows: the needed bytes of a non-Hopper one (a typed size assumes the default cuBLAS workspace)
        known = chosen["needed_bytes"].notna().to_numpy()
        n_unknown = int(chosen.loc[~known, "model"].nunique()) - int(chosen.loc[known, "model"].nunique())
        chosen = chosen[known]
        chosen = chosen.sort_values("_hopper", kind="stable").drop_duplicates(["model", "revision"])
        chosen = chosen.assign(max_batch=pd.NA, max_seq=pd.NA, decode_tokens_per_second=pd.NA, train_tokens_per_second=pd.NA)  # another GPU's
        fits = chosen["needed_bytes"] <= total
    considered = int(chosen["model"].nunique())
    fit = chosen[fits.to_numpy(dtype=bool)]
    if query.filter.strip():
        fit = fit[fit["model"].str.contains(query.filter.strip(), case=False, regex=False, na=False)]
    fit = fit.sort_values("total_bytes" if query.use == "serving" else "needed_bytes", ascending=False)
    shown = fit.head(limit)
    table = _serving_table(shown) if query.use == "serving" else _table(shown, total)
    words = USES.get(query.use, query.use)
    if query.use == "lora" and query.dtype == "int4":
        words = QLORA
    summary = (f"{len(fit):,} of {considered:,} models fit {name} ({total / GiB:.2f} GiB) — {words}, "
               f"{query.dtype}, {scenario or 'no scenario swept'}")
    if query.use == "serving":
        summary += " (fits: vLLM starts with one request of max model length; serving plans are per GPU swept)"
    if len(fit) > limit:
        summary += f"; the {limit:,} largest shown"
    if n_unknown > 0:
        summary += f"; {n_unknown:,} without a figure for this (their notes in the dataset say why)"
    if not_run:
        names = ", ".join(not_run[:3]) + (", ..." if len(not_run) > 3 else "")
        summary += (f"; {len(not_run):,} not listed because their simulation failed or the setting is past what they can run "
                    f"({names}; their notes say which)")
    if n_failed:
        summary += f"; {n_failed:,} could not be estimated (their errors are in the dataset)"
    return Answer(table=table, summary=summary + ".", fitting=len(fit), considered=considered, query=replace(query, scenario=scenario))


def _link(frame: pd.DataFrame) -> list[str]:
    return [f"[{m}](?{q})" for m, q in zip(frame["model"], frame["share_query"], strict=True)]


def _serving_plan(row: Any) -> tuple[Any, ...]:
    """(KV cache tokens, requests at once, max model length, max_num_seqs, max_num_batched_tokens) of a serving row: its
    columns, else its notes."""
    values = [row.get(k) for k in ("kv_cache_tokens", "max_concurrency", "max_model_len", "max_num_seqs", "max_num_batched_tokens")]
    notes = row.get("notes") if isinstance(row.get("notes"), str) else ""
    found = _KV_NOTE.search(notes)
    seqs = _SEQS_NOTE.search(notes)
    parsed: list[float | int | None] = [None] * 3
    if found:
        parsed = [int(found[1].replace(",", "")), float(found[3].replace(",", "")), int(found[2].replace(",", ""))]
    parsed.append(int(seqs[1].replace(",", "")) if seqs else None)
    batched = _TOKENS_NOTE.search(notes)
    parsed.append(int(batched[1].replace(",", "")) if batched else None)
    return tuple(v if v is not None and v == v else p for v, p in zip(values, parsed, strict=True))


def _serving_table(shown: pd.DataFrame) -> pd.DataFrame:
    import pandas as pd

    plans = [_serving_plan(row) for row in shown.to_dict("records")]
    return pd.DataFrame({
        "Model": _link(shown),
        "KV cache tokens": pd.array([p[0] for p in plans], dtype="Int64"),
        "Requests at once": pd.array([None if p[1] is None else round(p[1], 2) for p in plans], dtype="Float64"),
        "Max model len": pd.array([p[2] for p in plans], dtype="Int64"),
        "Weights GiB": (shown["total_bytes"].astype("Float64") / GiB).round(2),
        "Max seqs": pd.array([p[3] for p in plans], dtype="Int64"),
        "Max batched tokens": pd.array([p[4] for p in plans], dtype="Int64"),
        SPEED: _speed(shown),  # vLLM's decode tokens/s summed over the plan's concurrency (docs/speed.md, "vLLM serving")
        "vLLM starts": ["yes" if f is True else "no" if f is False else "" for f in shown["fits"].astype(object)],
        "Method": shown["method"].astype("string"),
        "Architecture": shown["architecture"].astype("string"),
    }, columns=list(SERVING_COLUMNS))


def _table(shown: pd.DataFrame, total: int) -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame({
        "Model": _link(shown),
        "Needed GiB": (shown["needed_bytes"] / GiB).round(2),
        "Free GiB": ((total - shown["needed_bytes"]) / GiB).round(2),
        "Weights GiB": (shown["total_bytes"].astype("Float64") / GiB).round(2),
        "Peak GiB": (shown["peak_bytes"].astype("Float64") / GiB).round(2),
        "Max batch": shown["max_batch"].astype("Int64"),
        "Max seq": shown["max_seq"].astype("Int64"),
        SPEED: _speed(shown),
        "Method": shown["method"].astype("string"),
        "Library": shown["library"].astype("string"),
        "Architecture": shown["architecture"].astype("string"),
    }, columns=list(COLUMNS))


def _speed(shown: pd.DataFrame) -> Any:
    """Each row's tokens/s from the sweep (decode for inference, the training step's for fine-tuning), rounded to 0.1."""
    import pandas as pd

    train = pd.to_numeric(shown["train_tokens_per_second"], errors="coerce")
    decode = pd.to_numeric(shown["decode_tokens_per_second"], errors="coerce")
    training = shown["mode"].astype("string").eq("training").fillna(False).to_numpy(dtype=bool)
    return pd.array(train.where(training, decode).round(1), dtype="Float64")


def from_params(params: Mapping[str, str]) -> Query | None:
    """The tab's :class:`Query` from a page URL's parameters (:data:`PARAMS`); None when none is given."""
    if not any(name in params for name in PARAMS):
        return None
    query = Query()
    changes: dict[str, Any] = {name[len("fits_"):]: str(params[name]).strip()[:200] for name in PARAMS if name in params}
    if "memory" in changes and not changes["memory"]:
        changes["memory"] = None  # empty: no size typed
    if changes.get("scenario") == "":
        changes["scenario"] = None
    if "checkpointing" in changes:
        text = str(changes.pop("checkpointing")).lower()
        changes["checkpointing"] = True if text in ("1", "true", "on", "yes") else False if text in ("0", "false", "off", "no") else None
    return replace(query, **changes)


def to_params(query: Query) -> str:
    """The query string that reopens the tab on ``query`` (every parameter of :data:`PARAMS`, in order)."""
    return urlencode([("fits_gpu", query.gpu or ""), ("fits_memory", query.memory or ""), ("fits_use", query.use),
                      ("fits_dtype", query.dtype), ("fits_scenario", query.scenario or ""), ("fits_filter", query.filter),
                      ("fits_checkpointing", "" if query.checkpointing is None else "1" if query.checkpointing else "0")])
