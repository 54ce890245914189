"""The results table in human units, the "how this is computed" note, and the exact downloads."""

from __future__ import annotations

import json
import re
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING

from estimator.report import to_csv
from estimator.units import format_bytes

if TYPE_CHECKING:
    import pandas as pd

    from estimator.result import Estimate, Row

TRAINING_LABEL = "Training with Adam (no activations)"
METHODS = {
    "exact": "built with the model's own code on PyTorch's meta device (no weights) and every "
    "parameter and buffer counted; exact, checked byte for byte against real CPU builds",
    "stored": "read from the checkpoint's safetensors headers on the Hub (dtype and shape of every "
    "stored tensor); exact for what the checkpoint holds",
    "formula": "a closed-form formula (documented in the core); an approximation",
}
SIMULATED = {
    "inference": "the model's real forward pass (generate's prefill, then each new token) run under fake tensors, "
    "tracking the bytes alive at each instant",
    "training": "the real forward, backward and optimizer step run under fake tensors, tracking the bytes alive at each instant",
    "serving": "vLLM's own budget (GPU memory x utilization, less the weights and its profile run's peak, simulated under "
    "fake tensors as vLLM runs it) divided into KV-cache blocks",
}
NOT_COMPUTED = "not available"  # the method shown for a row with no figure at all


def has_figures(row: Row) -> bool:
    return any(v is not None for v in (row.total_bytes, row.largest_layer_bytes, row.training_adam_bytes, row.peak_bytes))


def method_label(row: Row) -> str:
    """The row's method as the page shows it: a row with no figure is "not available", not "exact"."""
    return str(row.method) if has_figures(row) else NOT_COMPUTED


def results_frame(estimate: Estimate) -> pd.DataFrame:
    """One line per dtype, in binary units (GiB/MiB), with the method.

    The training column (weights + gradients + AdamW states) answers a load-mode question; in
    inference mode it is left out, and in training mode the peak column is the answer.
    """
    import pandas as pd

    mode = estimate.mode.value
    records = []
    held = any(row.weights_held for row in estimate.rows)  # a pre-quantized checkpoint: its float rows keep its quantized tensors
    for row in estimate.rows:
        record = {"dtype": str(row.dtype)}
        if held:
            record["Weights held as"] = row.weights_held or str(row.dtype)
        if mode != "load":
            strategy = estimate.options.get("strategy")
            per_gpu = f", per GPU (× {per_gpu_count(estimate)}), {strategy}" if strategy else ""
            record[f"Peak ({mode}{per_gpu})"] = format_bytes(row.peak_bytes)
            if row.cpu_bytes is not None:
                record["CPU memory per node (offload)"] = format_bytes(row.cpu_bytes)
        record["Total size"] = format_bytes(row.total_bytes)
        record["Largest layer"] = format_bytes(row.largest_layer_bytes)
        if mode == "load":
            record[TRAINING_LABEL] = format_bytes(row.training_adam_bytes)
        if mode == "serving":
            plan = row.serving or {}
            record["KV cache"] = _serving_cell(plan.get("kv_cache_bytes"), "bytes")
            record["Tokens of KV cache"] = _serving_cell(plan.get("kv_cache_tokens"), "count")
            record["Requests at once"] = _serving_cell(plan.get("max_concurrency"), "number")
        record["method"] = method_label(row)
        records.append(record)
    return pd.DataFrame.from_records(records)


WARNING = "warning: "  # the core's notes that say an input is outside what the model supports start so


def warnings_html(estimate: Estimate) -> str:
    """The core's warnings (notes starting ``warning:``), each once with its rows, for beside the result."""
    found = [(applies, note.removeprefix(WARNING)) for applies, note in grouped_notes(estimate) if note.startswith(WARNING)]
    if not found:
        return ""
    items = "".join(f"<li>{escape(', '.join(applies))}: {escape(note)}</li>" for applies, note in found)
    return f'<div class="mme-warning" role="note"><strong>Check this:</strong><ul>{items}</ul></div>'


MODE_WORDS = {"load": "Load", "inference": "Run (inference)", "training": "Fine-tune", "serving": "Serve with vLLM"}


def setting_words(estimate: Estimate) -> str:
    """The setting of a result in one line: ``"Fine-tune, LoRA r16 · bfloat16 · batch 1 × 512 tokens · on RTX 4090"``.

    From the options that shaped it (``Estimate.options``), defaults resolved (a sequence length
    left to the default is its 512 tokens), so two results can be compared from their first lines.
    """
    options = estimate.options
    mode = estimate.mode.value
    what = MODE_WORDS.get(mode, mode)
    if mode == "training":
        rank = options.get("lora_rank")
        dtypes = options.get("dtypes") or []
        what += (f", QLoRA r{rank} (int4 rows)" if rank and "int4" in dtypes else f", LoRA r{rank}") if rank else ", full"
        what += f", {options.get('optimizer', 'adamw')}"
        if options.get("gradient_checkpointing"):
            what += ", gradient checkpointing"
    parts = [what, ", ".join(str(d) for d in options.get("dtypes") or (str(row.dtype) for row in estimate.rows))]
    if mode in ("inference", "training") and options.get("seq_len"):
        shape = f"batch {options.get('batch_size', 1):,} × {options['seq_len']:,} tokens"
        if options.get("max_new_tokens"):
            shape += f" + {options['max_new_tokens']:,} new"
        parts.append(shape)
    if mode == "serving":
        length = options.get("max_model_len")
        parts.append(f"max model length {length:,}" if length else "the model's max length")
    gpu = options.get("gpu") or options.get("gpu_memory")
    n = per_gpu_count(estimate)
    where = "on CPU" if options.get("device") == "cpu" else f"on {gpu}" if gpu else "no GPU chosen"
    if n > 1:
        where += f", per GPU (× {n}{', ' + str(options['strategy']) if options.get('strategy') else ''})"
    parts.append(where)
    return " · ".join(parts)


def per_gpu_count(estimate: Estimate) -> int:
    """How many GPUs the figures are per GPU of (1: one GPU): a strategy's world size, or vLLM's tensor x pipeline ranks."""
    options = estimate.options
    if options.get("strategy"):
        return int(options.get("gpus", 1)) * int(options.get("nodes", 1))
    return int(options.get("tensor_parallel_size", 1) or 1) * int(options.get("pipeline_parallel_size", 1) or 1)


def summary_html(estimate: Estimate, *, stale: bool = False) -> str:
    """The setting (:func:`setting_words`), the summary line as HTML, and the core's warnings; ``stale`` marks it as the
    last result that worked."""
    revision = f" @ <code>{escape(estimate.revision[:12])}</code>" if estimate.revision else ""
    arch = f" ({escape(estimate.architecture)})" if estimate.architecture else ""
    badge = '<span class="mme-stale">Last result that worked</span> ' if stale else ""
    return (
        f'<p class="mme-setting" id="setting">{escape(setting_words(estimate))}</p>'
        f'<p class="mme-summary{" mme-summary-stale" if stale else ""}">{badge}<strong>{escape(estimate.model)}</strong>{revision}{arch}'
        f" · library {escape(estimate.library)} · source {escape(estimate.source)} · mode {escape(estimate.mode.value)}</p>"
        + speed_html(estimate)
        + warnings_html(estimate)
    )


def speed_words(estimate: Estimate) -> list[str]:
    """Each row's verdict beside its speed (``rows[].speed``, with a GPU named; docs/speed.md):
    ``"bfloat16: fits · ~102.4 tok/s decode, TTFT 113 ms on H100 80GB (roofline)"``."""
    from estimator.speed.transformers_speed import short_speed

    out = []
    for row in estimate.rows:
        if not row.speed:
            continue
        fits = (row.fit or row.serving or {}).get("fits")  # a serving row's plan is its fit (vLLM starts)
        verdict = "fits · " if fits is True else "does not fit · " if fits is False else ""
        out.append(f"{row.dtype}: {verdict}{short_speed(row.speed)} on {row.speed.get('hardware')} ({row.speed.get('label')})")
    return out


def speed_html(estimate: Estimate) -> str:
    """:func:`speed_words` as a line under the summary (none without a speed answer)."""
    words = speed_words(estimate)
    return f'<p class="mme-speed" id="speed">{escape(" · ".join(words) if len(words) == 1 else "; ".join(words))}</p>' if words else ""


def markdown_text(text: str) -> str:
    """``text`` shown as written in Markdown: ``*``, ``_``, brackets, backticks and ``<`` are not markup."""
    return re.sub(r"([\\`*_\[\]<>|#])", r"\\\1", text)


def grouped_notes(estimate: Estimate) -> list[tuple[list[str], str]]:
    """Every note once, with the dtypes it applies to, in first-seen order."""
    seen: dict[str, list[str]] = {}
    for row in estimate.rows:
        for note in row.notes:
            seen.setdefault(note, [])
            if str(row.dtype) not in seen[note]:
                seen[note].append(str(row.dtype))
    return [(dtypes, note) for note, dtypes in seen.items()]


def method_note(estimate: Estimate) -> str:
    """Markdown: how each row was computed, and its notes (each note once, with the rows it applies to)."""
    mode = estimate.mode.value
    lines = ["**How this is computed.** Sizes are binary units (1 GiB = 1024³ bytes); exact byte counts are in the CSV and JSON downloads."]
    labels = {str(row.dtype): method_label(row) for row in estimate.rows}
    for method in dict.fromkeys(labels.values()):
        dtypes = ", ".join(d for d, m in labels.items() if m == method)
        if method == NOT_COMPUTED:
            lines.append(f"- *{method}* ({dtypes}): no figure for this row; the notes below say why.")
            continue
        text = SIMULATED.get(mode, SIMULATED["training"]) if method == "simulated" else METHODS.get(method, method)
        lines.append(f"- *{method}* ({dtypes}): {text}.")
    if mode == "load":
        lines.append(
            "- *Training with Adam*: weights + gradients + AdamW's two moments (+ fp32 master weights for 16-bit rows, "
            "mixed precision); activations are not included."
        )
    everyone = len(estimate.rows)
    for applies, note in grouped_notes(estimate):
        who = "all rows" if len(applies) == everyone and everyone > 1 else ", ".join(applies)
        lines.append(f"- {markdown_text(note)}" if note.startswith(f"{who}:") else f"- {who}: {markdown_text(note)}")
    return "\n".join(lines)


def frame_html(frame: pd.DataFrame, *, label: str, verdicts: tuple[str, ...] = (), cards: bool = False) -> str:
    """A DataFrame as an accessible HTML table: a caption-labelled region that scrolls sideways with a visible cue.

    Generic in the columns: ``verdicts`` names the columns that hold a verdict ("fits (…)" /
    "does not fit (…)"), styled and, with ``cards``, shown first on each card at phone width (one
    card per line, every cell labelled by its column), so nothing essential is off-screen.
    """
    frame = frame.rename(columns=str)
    first, *others = list(frame.columns)
    frame = frame[[first, *(c for c in others if c in verdicts), *(c for c in others if c not in verdicts)]]  # verdicts beside the name
    columns = list(frame.columns)
    head = "".join(f'<th scope="col"{" class=mme-verdict-col" if c in verdicts else ""}>{escape(c)}</th>' for c in columns)
    body = []
    for values in frame.itertuples(index=False):
        cells = []
        for i, (column, value) in enumerate(zip(columns, values, strict=True)):
            text = "—" if value is None or (isinstance(value, float) and value != value) else str(value)
            classes = []
            if column in verdicts:
                classes.append("mme-verdict")
                classes.append("mme-no" if text.startswith("does not fit") else "mme-partial" if text.startswith("fits with")  # GGUF: some layers in RAM
                               else "mme-yes" if text.startswith("fits") else "mme-unknown")
            attr = f' class="{" ".join(classes)}"' if classes else ""
            tag = "th" if i == 0 else "td"
            scope = ' scope="row"' if i == 0 else ""
            cells.append(f'<{tag}{scope}{attr} data-label="{escape(column)}">{escape(text)}</{tag}>')
        body.append(f"<tr>{''.join(cells)}</tr>")
    kind = " mme-cards" if cards else ""
    return (
        f'<div class="mme-table{kind}"><p class="mme-title" aria-hidden="true">{escape(label)}</p>'
        '<p class="mme-cue" aria-hidden="true">Scroll sideways for more columns →</p>'
        f'<div class="mme-scroll" tabindex="0" role="region" aria-label="{escape(label)}">'
        f'<table><caption class="mme-sr">{escape(label)}</caption><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div></div>'
    )


# The serving plan's lines (mode "serving"): the row field's key, its label, how it is shown.
SERVING_LINES: tuple[tuple[str, str, str], ...] = (
    ("capacity_bytes", "GPU memory (driver)", "bytes"),
    ("requested_bytes", "x GPU memory utilization", "bytes"),
    ("weights_bytes", "- weights", "bytes"),
    ("profile_peak_bytes", "- profile run's peak above the weights", "bytes"),
    ("cuda_graph_bytes", "- CUDA graphs", "bytes"),
    ("non_torch_bytes", "- memory outside PyTorch", "bytes"),
    ("kv_cache_bytes", "= KV cache", "bytes"),
    ("kv_bytes_per_token", "KV cache per token", "bytes"),
    ("state_bytes_per_request", "Recurrent state per request (conv + SSM)", "bytes"),
    ("block_size", "Tokens per block", "count"),
    ("num_blocks", "KV blocks", "count"),
    ("kv_cache_tokens", "Tokens of KV cache", "count"),
    ("max_model_len", "Max model length", "count"),
    ("max_concurrency", "Requests of max model length at once", "number"),
    ("fits", "One max-length request fits (vLLM starts)", "flag"),
)


def _serving_cell(value: object, kind: str) -> str:
    if value is None:
        return "—"
    if kind == "bytes" and isinstance(value, int):
        return format_bytes(value) if value >= 0 else "-" + format_bytes(-value)
    if kind == "count" and isinstance(value, int):
        return f"{value:,}"
    if kind == "flag":
        return "yes" if value else "no"
    return f"{value:,.2f}" if isinstance(value, float) else str(value)


def serving_html(estimate: Estimate) -> str:
    """The serving plan (mode "serving"): one line per step of vLLM's budget, one column per dtype row."""
    import pandas as pd

    planned = [row for row in estimate.rows if row.serving]
    if not planned:
        return '<p class="mme-note">No serving plan: no row of this result could be planned (see the notes).</p>'
    records = []
    for key, label, kind in SERVING_LINES:
        if key == "state_bytes_per_request" and not any((row.serving or {}).get(key) for row in planned):
            continue  # a model without recurrent layers
        record = {"vLLM budget": label}
        for row in planned:
            record[str(row.dtype)] = _serving_cell(row.serving.get(key) if row.serving else None, kind)
        records.append(record)
    gpu = estimate.options.get("gpu") or estimate.options.get("gpu_memory") or "the GPU"
    n = per_gpu_count(estimate)
    return (frame_html(pd.DataFrame.from_records(records), label=f"Serving plan on {gpu}" + (f", per GPU (× {n})" if n > 1 else ""))
            + f'<p class="mme-note">{_serving_scope(planned[0].serving or {})}As vLLM plans it at start-up '
              '(docs/serving.md says where its accounting differs).</p>')


def _serving_scope(plan: dict[str, object]) -> str:
    """Which vLLM and how many GPUs the figures are for (per rank under tensor or pipeline parallelism)."""
    version = plan.get("vllm_version")
    tp, pp = plan.get("tensor_parallel_size", 1), plan.get("pipeline_parallel_size", 1)
    scope = f"vLLM {version}. " if version else ""
    if tp != 1 or pp != 1:
        scope += (f"Per GPU (× {int(tp) * int(pp)}: tensor parallel {tp} × pipeline parallel {pp})"  # type: ignore[call-overload]
                  + (f"; pipeline stage {plan.get('limiting_stage')} has the fewest blocks and sizes every stage's cache" if pp != 1 else "")
                  + ". ")
    return scope


def results_html(estimate: Estimate) -> str:
    return frame_html(results_frame(estimate), label="Memory per dtype")


def fits_html(estimate: Estimate, frame: pd.DataFrame, caption: str, device: str = "cuda") -> str:
    """The "fits on" table (any columns the core's ``fits_frame`` gives; one verdict column per dtype row).

    With the target device ``cpu`` no GPU verdict is shown: the visitor asked about a CPU run.
    """
    if device == "cpu":
        return ('<p class="mme-note">Target device is cpu: these figures are for a CPU run, so no GPU is listed. '
                "Choose cuda under Advanced to see which GPUs it fits on.</p>")
    verdicts = tuple(str(row.dtype) for row in estimate.rows if str(row.dtype) in frame.columns)
    return frame_html(frame, label="Fits on", verdicts=verdicts, cards=True) + f'<p class="mme-note">{escape(caption)}</p>'


def result_key(estimate: Estimate) -> str:
    """A short digest of the result's JSON: the same result reuses the same download folder."""
    import hashlib

    return hashlib.sha256(json.dumps(estimate.to_dict(), sort_keys=True).encode()).hexdigest()[:24]


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")[:80] or "estimate"


def write_downloads(estimate: Estimate, folder: Path) -> tuple[Path, Path]:
    """Write ``<model>.csv`` and ``<model>.json`` (exact integers) into ``folder``; return their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    stem = _slug(estimate.model.rstrip("/").split("/")[-1] if estimate.source == "local" else estimate.model)
    csv_path = folder / f"{stem}-memory.csv"
    json_path = folder / f"{stem}-memory.json"
    csv_path.write_text(to_csv(estimate), encoding="utf-8")
    json_path.write_text(json.dumps(estimate.to_dict(), indent=2) + "\n", encoding="utf-8")
    return csv_path, json_path
