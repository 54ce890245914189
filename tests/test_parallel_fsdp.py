"""FSDP2 per-rank peak: the simulation against a real 2-process run on CPU (gloo, torch.profiler).

The truth (``testkit/fsdp_truth.py``) runs ``torchrun --nproc_per_node 2``: every rank builds the
tiny model, shards it with ``fully_shard`` per block and on the root, and runs two AdamW steps
under the profiler. A rank's peak varies from run to run: gloo frees its collective buffers on a
worker thread, so a run's peak lies between two schedules the simulation can play — the early end,
every buffer freed as its collective returns (``GLOO_HELD = 0``), and the late end we report. The
early end equals the smallest measured peak to within 60 bytes in all 10 cases of the bench; which
runs reach either end depends on the threads' timing (a CI machine measured the early end in 6
of 6 rank peaks, and another, loaded by a second test worker and mypy, in 0 of 6: its smallest was
1.4% above), so a run of three here checks what holds for every run: every measured rank peak lies
between the early end and 3% above what we report, and what we report is not below the median.
The issue's target over many runs (never below the median, within 3% of the largest) and the early end
against the smallest measured peak are ``bench/fsdp_accuracy.py`` (``bench/results/fsdp_accuracy.md``:
5 architectures with and without checkpointing, 5 runs each).
"""

from __future__ import annotations

import statistics

import pytest
import torch

from estimator.options import ParallelSpec, Strategy
from estimator.peak.parallel.simulate import simulate_parallel
from testkit import fsdp_truth
from testkit.peak_cases import CASES

CASE, RECIPE, RUNS = "bert_mlm", "plain", 3  # its 10 measured rank peaks in the bench spread 6%


def test_fsdp_rank_peak_against_torchrun_gloo() -> None:
    measured = [peak for run in fsdp_truth.run(CASE, RECIPE, RUNS) for peak in run]
    ours = fsdp_truth.simulate(CASE, RECIPE)
    early = fsdp_truth.simulate(CASE, RECIPE, gloo_held=0)
    assert early < ours
    assert all(0.999 * early <= peak <= 1.03 * ours for peak in measured), (early, ours, measured)
    assert ours >= statistics.median(measured), (ours, measured)


def test_fsdp_shards_the_model_states() -> None:
    """Rank 0 of 2 holds half of every sharded parameter's padded rows, and AdamW's two states of
    that half: counted here from the model's shapes, independently of the simulation."""
    with torch.device("meta"):
        model = CASES["llama_gqa"].build()
    shard = sum(-(-p.shape[0] // 2) * (p.numel() // p.shape[0]) * p.element_size() for p in model.parameters())
    spec = ParallelSpec(gpus=2, strategy=Strategy.FSDP)
    found = simulate_parallel(model, spec, mode="training", device="cuda", batch_size=2, seq_len=64).peak
    # AdamW's exp_avg and exp_avg_sq of the shard, and a 4-byte step per parameter
    n_params = len(list(CASES["llama_gqa"].build_on("meta").parameters()))
    assert found.components["optimizer_states"] == 2 * shard + 4 * n_params
    assert found.components["weights"] >= shard  # the shard, plus the unsharded blocks live at the peak
    assert sum(found.components.values()) == found.peak_bytes


@pytest.mark.parametrize("gpus", [2, 4])
def test_more_gpus_less_memory(gpus: int) -> None:
    one = ParallelSpec(gpus=1, strategy=Strategy.FSDP)
    many = ParallelSpec(gpus=gpus, strategy=Strategy.FSDP)
    peaks = []
    for spec in (one, many):
        with torch.device("meta"):
            model = CASES["llama_gqa"].build()
        peaks.append(simulate_parallel(model, spec, mode="training", device="cuda", batch_size=2, seq_len=64).peak.peak_bytes)
    assert peaks[1] < peaks[0]
