"""The CPU allocator's real peak of each rank of an FSDP2 training run, for checking the simulation.

Run under ``torchrun --nproc_per_node 2 -m testkit.fsdp_truth CASE RECIPE OUT_JSON`` (gloo
backend, CPU): every rank builds the tiny case model for real (``testkit.peak_cases``), applies the
recipe the way a user script does (``gradient_checkpointing_enable()``), calls ``fully_shard`` on
every module whose class is in the model's ``_no_split_modules`` (accelerate's FSDP2 auto-wrap
rule, TorchTitan's per-block sharding; a block holding a weight tied outside it, BERT's
embeddings, stays in the root's group) and then on the root, builds ``torch.optim.AdamW`` over the
sharded parameters and runs two steps of forward + loss + backward + step + ``zero_grad``. The
peak is the maximum "Total Allocated" of ``torch.profiler``'s memory events inside the window of
the two steps; the profiler starts before the model is built, so the bytes the rank holds when
the window opens (its sharded parameters, its inputs) are in that total, and the unsharded
initial parameters, freed by ``fully_shard``, are not. Rank 0 writes ``{"peaks": [rank0, rank1]}``
to OUT_JSON. Nothing here calls the estimator's parallel code.

``run(case, recipe, runs)`` starts ``runs`` such torchrun jobs one after another and returns the
per-run rank peaks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from typing import Any

import torch

from testkit.truth import trace_events, window_peak

_WORK = "fsdp_training_work"
SEQ_LEN = 128  # batch 2 x 128 tokens per rank, as the training truths
RECIPES = ("plain", "checkpointing")


def _wrap_classes(model: Any) -> set[str]:
    return set(getattr(model, "_no_split_modules", None) or ())


def shard(model: Any) -> Any:
    """``fully_shard`` per block (classes of ``_no_split_modules``), then the root; returns the model."""
    from torch.distributed.fsdp import fully_shard

    classes = _wrap_classes(model)
    owners: dict[int, set[int]] = {}  # parameter -> the modules that hold it (tied weights: several)
    for module in model.modules():
        for p in module.parameters(recurse=False):
            owners.setdefault(id(p), set()).add(id(module))
    for module in list(model.modules()):
        if module is model or type(module).__name__ not in classes:
            continue
        inside = {id(m) for m in module.modules()}
        if all(owners[id(p)] <= inside for p in module.parameters()):  # a tied block stays with the root (FSDP2 refuses one parameter in two groups)
            fully_shard(module)
    fully_shard(model)
    return model


def measure(case_name: str, recipe: str) -> int:
    """This rank's peak (the process group already initialised)."""
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, record_function

    from estimator.peak.inputs.providers import workload_for
    from testkit.peak_cases import CASES
    from testkit.training_truth import train_step

    case = CASES[case_name]
    torch.manual_seed(0)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        model = case.build()
        wl = workload_for(model, batch_size=case.batch_size, seq_len=SEQ_LEN, image_size=case.image_size)
        inputs = wl.make_inputs()
        if recipe == "checkpointing":
            model.gradient_checkpointing_enable()
        model = shard(model)
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        dist.barrier()
        with record_function(_WORK):
            for _ in range(2):
                train_step(model, wl, inputs, opt, None)
        dist.barrier()
        del model, inputs, opt
    return window_peak(trace_events(prof), _WORK)


def _main(case_name: str, recipe: str, out: str) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo")
    try:
        peak = measure(case_name, recipe)
        peaks: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(peaks, peak)
        if dist.get_rank() == 0:
            with open(out, "w") as handle:
                json.dump({"peaks": peaks}, handle)
    finally:
        dist.destroy_process_group()


def run(case_name: str, recipe: str, runs: int, *, nproc: int = 2, timeout: float = 600.0) -> list[list[int]]:
    """``runs`` torchrun jobs of ``nproc`` ranks, one after another; each run's rank peaks."""
    results = []
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TRANSFORMERS_VERBOSITY": "error"}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(runs):
            out = os.path.join(tmp, f"run{i}.json")
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc),
                   "-m", "testkit.fsdp_truth", case_name, recipe, out]
            done = subprocess.run(["nice", *cmd], env=env, timeout=timeout, capture_output=True, text=True)
            if done.returncode != 0:
                raise RuntimeError(f"torchrun failed ({done.returncode}): {done.stderr[-3000:]}")
            with open(out) as handle:
                results.append(json.load(handle)["peaks"])
    return results


def simulate(case_name: str, recipe: str, gpus: int = 2, *, gloo_held: int | None = None) -> int:
    """What ``estimate-memory --device cpu --gpus 2 --strategy fsdp`` reports per rank for the same run.

    ``gloo_held=0`` simulates the early end of gloo's schedule instead of the late end we report
    (every collective's buffer freed as the collective returns; ``estimator.peak.parallel.fsdp.GLOO_HELD``)."""
    if gloo_held is not None:
        from unittest import mock

        from estimator.peak.parallel import fsdp

        with mock.patch.object(fsdp, "GLOO_HELD", gloo_held):
            return simulate(case_name, recipe, gpus)
    from estimator.options import ParallelSpec, Strategy
    from estimator.peak.parallel.simulate import simulate_parallel
    from estimator.peak.sim.training import Recipe
    from testkit.peak_cases import CASES

    case = CASES[case_name]
    with torch.device("meta"):
        model = case.build()
    found = simulate_parallel(model, ParallelSpec(gpus=gpus, strategy=Strategy.FSDP), mode="training", device="cpu",
                              batch_size=case.batch_size, seq_len=SEQ_LEN, image_size=case.image_size,
                              recipe=Recipe(gradient_checkpointing=recipe == "checkpointing"))
    return found.peak.peak_bytes


if __name__ == "__main__":
    _main(sys.argv[1], sys.argv[2], sys.argv[3])
    # Leave without the interpreter's teardown: a gloo or profiler thread still joinable at exit can abort
    # the process ("terminate called without an active exception") after the results are written.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
