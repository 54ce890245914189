"""Replaying real vLLM start-ups (tests/data/vllm_runs: a copy of the shared vllm-runs set, its README says
what each field is) through the serving planner, rank by rank.

Every run that sized its KV cache is planned with its own settings (dtype, gpu_memory_utilization,
max_model_len, max_num_seqs, max_num_batched_tokens, kv_cache_dtype, quantization, tensor and pipeline
parallel sizes) on the GPU it ran on (H100 80GB from the GPU table), and compared per rank with what
vLLM printed: "Model loading took" (weights), the profile run's torch peak increase, the non-torch
increase, "Available KV cache memory" and "GPU KV cache size" in tokens. Pipeline stages other than the
first print no "Model loading" line: their weights are the stage's non-KV total less its peak and
non-torch figures (all three printed by that stage).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from estimator.fit.gpus import find_gpu
from estimator.options import DType, KVCacheDType, ServingQuantization, ServingSpec
from estimator.serving.ranks import stage_plans

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "vllm_runs"
GiB = 1024**3


def runs() -> list[dict[str, Any]]:
    return json.loads((DATA / "runs.json").read_text())


def sized_runs() -> list[dict[str, Any]]:
    """The runs that printed an available KV cache (some later failed while warming up: the sizing stands)."""
    return [r for r in runs() if (r.get("figures") or {}).get("available_kv_cache_gib") is not None]


@functools.cache
def built(model_id: str, dtype: str) -> Any:
    """The model of ``model_id`` (its config copied under tests/data/vllm_runs/configs) built on meta in ``dtype``."""
    from estimator.load.rows import build
    from estimator.options import Library
    from estimator.source.reference import parse_reference
    from estimator.source.resolve import resolve_local

    folder = DATA / "configs" / model_id.replace("/", "__")
    resolved = resolve_local(parse_reference(str(folder)), Library.TRANSFORMERS)
    return build(resolved, DType.parse(dtype, option="dtypes"))


@dataclass(frozen=True)
class RankFigures:
    """One rank's figures (GiB, tokens): vLLM's, or ours."""

    weights: float | None
    peak: float | None
    non_torch: float | None
    available: float | None
    tokens: int | None = None


@dataclass(frozen=True)
class Replay:
    run: dict[str, Any]
    ranks: tuple[tuple[str, RankFigures, RankFigures], ...]  # (rank name, vLLM's, ours)
    tokens_vllm: int
    tokens_ours: int
    phases: tuple[str, ...]  # which phase decides our peak, per stage


def _theirs(run: dict[str, Any]) -> list[tuple[str, RankFigures]]:
    figures = run["figures"]
    pp = run["pipeline_parallel_size"]
    per_rank = run.get("per_rank") or {}
    if pp == 1:
        return [("rank 0", RankFigures(figures.get("model_loading_gib"), figures.get("torch_peak_increase_gib"),
                                       figures.get("non_torch_forward_increase_gib"), figures["available_kv_cache_gib"]))]
    out = []
    calc = run.get("per_rank_available_kv_calc_gib") or {}
    for stage in range(pp):
        name = f"Worker_PP{stage}"
        rank = per_rank[name]
        peak, nt, total = rank.get("torch_peak_increase_gib"), rank.get("non_torch_forward_increase_gib"), rank.get("total_non_kv_cache_gib")
        weights = rank.get("model_loading_gib") or (round(total - peak - nt, 2) if None not in (total, peak, nt) else None)
        out.append((f"PP stage {stage}", RankFigures(weights, peak, nt, calc.get(name))))
    return out


def replay(run: dict[str, Any]) -> Replay:
    dtype = run.get("dtype") or "bfloat16"  # JSON-only records: --dtype auto, every model here is bfloat16
    model = built(run["model_id"], dtype)
    gpu = find_gpu(run.get("gpu_name") or "H100 80GB")
    tokens = run.get("max_num_batched_tokens") or 8192
    seqs = run.get("max_num_seqs") or 1024
    serving = ServingSpec(
        gpu_memory_utilization=run["gpu_memory_utilization"], max_model_len=run["max_model_len"], max_num_seqs=seqs,
        max_num_batched_tokens=tokens, kv_cache_dtype=KVCacheDType.parse(run.get("kv_cache_dtype") or "auto", option="kv_cache_dtype"),
        block_size=16, tensor_parallel_size=run["tensor_parallel_size"], pipeline_parallel_size=run["pipeline_parallel_size"],
        quantization=ServingQuantization.FP8 if run.get("quantization_requested") == "fp8" else ServingQuantization.NONE,
    )
    row_dtype = DType.parse(dtype, option="dtypes")
    kv_bytes = 1 if serving.kv_cache_dtype is KVCacheDType.FP8 else (4 if row_dtype is DType.FLOAT32 else 2)
    stages = stage_plans(model, model.config, row_dtype, kv_bytes, serving, gpu.total_bytes, max_model_len=run["max_model_len"],
                         max_num_seqs=seqs, max_num_batched_tokens=tokens, gpu_name=gpu.name)
    theirs = _theirs(run)
    ranks = []
    for (name, vllm), (plan, _) in zip(theirs, stages, strict=True):
        ours = RankFigures(plan.weights_bytes / GiB, plan.profile_peak_bytes / GiB, plan.non_torch_bytes / GiB,
                           plan.available_kv_bytes / GiB, plan.blocks.tokens)
        ranks.append((name, vllm, ours))
    fewest = min(stages, key=lambda s: s[0].blocks.num_blocks)[0]
    return Replay(run, tuple(ranks), int(run["figures"]["gpu_kv_cache_tokens"]), fewest.blocks.tokens,
                  tuple(p.phase for _, p in stages))
