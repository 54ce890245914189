"""The dataset card (``OUT/README.md``) and the upload to a Hub dataset repo (huggingface_hub)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from estimator_sweep.grid import Grid
from estimator_sweep.rows import COLUMNS, estimator_version
from estimator_sweep.store import DATA, read_dataset

METHODS = {
    "stored": "counted from the checkpoint's safetensors (or GGUF) headers, read with HTTP Range requests; no weights downloaded",
    "exact": "counted on the model built by its own library (transformers, timm, diffusers, sentence-transformers) on the meta device",
    "simulated": "the peak of live tensor bytes while the model's own forward (and backward and optimizer step) runs on fake tensors",
    "formula": "a documented formula (GGUF inference: llama.cpp's buffers; rows the simulation does not reach)",
}


def card(out: Path, grid: Grid) -> str:
    """A Hub dataset card saying what each row holds and how its figures were obtained."""
    table = read_dataset(out)
    rows = table.num_rows
    models = len(set(table.column("reference").to_pylist()))
    methods = Counter(m for m in table.column("method").to_pylist() if m)
    errors = Counter(k for k in table.column("error_kind").to_pylist() if k)
    scenarios = "\n".join(f"- `{s.estimate_kwargs()}`" for s in grid.scenarios())
    if grid.device == "cpu":  # the CPU kernels' per-thread scratch follows the thread count simulated
        scenarios += f"\n- every scenario simulates a CPU run of {grid.cpu_threads} threads (`cpu_threads`)"
    columns = ", ".join(f"`{name}`" for name, _, _ in COLUMNS)
    method_lines = "\n".join(f"- `{m}` ({methods.get(m, 0)} rows): {text}" for m, text in METHODS.items())
    error_line = ", ".join(f"{k}: {n}" for k, n in sorted(errors.items())) or "none"
    return f"""---
configs:
- config_name: default
  data_files:
  - split: train
    path: {DATA}/*.parquet
tags:
- memory-estimation
- gpu
---

# What fits my GPU: memory estimates for {models} models

{rows} rows, one per model x dtype x mode x scenario x GPU, written by `estimate-memory sweep`
(Model Memory Estimator {estimator_version()}): each row is the answer of `estimator.estimate()` for that model at the
commit in `revision`, with the options in its columns. No weights were downloaded and no GPU was used.

## How the figures were obtained

The `method` column says it, row by row:

{method_lines}

With a GPU (`gpu`), `fits`, `needed_bytes`, `max_batch` and `max_seq` come from replaying the simulated allocations through
PyTorch's CUDA caching-allocator rules plus the CUDA context and cuBLAS workspace for that GPU; `max_batch` and `max_seq` are
verified by simulating at the answer and one step above. A figure that could not be computed is null with a note (`notes`), never a guess.
Rows whose estimate failed carry `error` (the message the CLI prints) and `error_kind` ({error_line}).
The `share_query` column opens the same answer in the estimator's page (`?` + `share_query`).

## Grid

Scenarios run for every model:

{scenarios}

## Columns

{columns} (types and meanings: the project's docs/CONTRACT.md, "Sweep").
"""


def write_card(out: Path, grid: Grid) -> Path:
    path = out / "README.md"
    path.write_text(card(out, grid), encoding="utf-8")
    return path


def push_to_hub(out: Path, repo_id: str, *, grid: Grid, token: str | None = None, private: bool | None = None) -> str:
    """Create (or reuse) the dataset repo ``repo_id`` and upload the card and the parts; returns the commit's URL."""
    from huggingface_hub import HfApi

    write_card(out, grid)
    api = HfApi(token=token)
    api.create_repo(repo_id, repo_type="dataset", exist_ok=True, private=private)
    info = api.upload_folder(repo_id=repo_id, repo_type="dataset", folder_path=str(out), allow_patterns=["README.md", f"{DATA}/*.parquet"],
                             commit_message=f"estimate-memory sweep: {read_dataset(out).num_rows} rows")
    return str(info.commit_url) if hasattr(info, "commit_url") else str(info)
