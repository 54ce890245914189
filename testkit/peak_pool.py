"""Run ground-truth measurements of the peak cases in fresh processes, and their simulations beside them.

A ``forkserver`` pool whose server has already imported torch, transformers, timm and the case
models forks one fresh child per measurement (``maxtasksperchild=1``): each profiled measurement starts
with no tensor left alive by earlier profiled code, without paying the imports each time. The simulations
(fake tensors: nothing real is allocated, nothing measured) run in the calling process meanwhile, one after
another as the estimator runs them (the CLI's and the app's many answers in one process): a forked child per
simulation paid the fork and a first simulation's warm-up each time (the 38 simulations of tests/test_peak_accuracy.py:
55 s of CPU as forked children, their server's imports included, against 14 s here).
"""

from __future__ import annotations

import functools
import importlib
import multiprocessing as mp
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

Job = TypeVar("Job", bound=tuple[Any, ...])  # (kind, case, ...): kind "truth" or "recipe_truth" measures (MEASURED), any other simulates

PRELOAD = [
    "torch",
    "timm",
    "transformers",
    "transformers.models.llama.modeling_llama",
    "transformers.models.mistral.modeling_mistral",
    "transformers.models.qwen2.modeling_qwen2",
    "transformers.models.mixtral.modeling_mixtral",
    "transformers.models.gemma.modeling_gemma",
    "transformers.models.gpt2.modeling_gpt2",
    "transformers.models.bert.modeling_bert",
    "transformers.models.roberta.modeling_roberta",
    "transformers.models.t5.modeling_t5",
    "transformers.models.bart.modeling_bart",
    "transformers.models.vit.modeling_vit",
    "estimator.peak",
    "testkit.peak_cases",
    "testkit.peak_truth",
    "testkit.training_truth",
    "peft",
    "bitsandbytes",
]


def _truth(case: str, mode: str) -> int:
    from testkit.peak_truth import measure

    return measure(case, mode)["peak_bytes"]


def _simulate(case: str, mode: str, device: str = "cpu") -> dict[str, Any]:
    from estimator.peak import simulate_peak
    from testkit.peak_cases import CASES

    c = CASES[case]
    r = simulate_peak(c.build_on("meta"), mode=mode, device=device,  # type: ignore[arg-type]
                      batch_size=c.batch_size, seq_len=c.seq_len, image_size=c.image_size)
    return {"peak_bytes": r.peak_bytes, "components": r.components, "method": r.method,
            "notes": list(r.notes)}


def _run(job: tuple[str, str, str]) -> tuple[tuple[str, str, str], Any]:
    kind, case, mode = job
    try:
        value: Any
        if kind == "truth":
            value = _truth(case, mode)
        elif kind == "sim":
            value = _simulate(case, mode)
        elif kind == "recipe_truth":
            from testkit.training_truth import measure

            value = measure(case, mode)["peak_bytes"]
        else:
            from testkit.training_truth import simulate

            value = simulate(case, mode)
    except Exception as exc:  # noqa: BLE001 - reported by the test that needs it
        value = exc.__class__.__name__ + ": " + str(exc)
    return job, value


def run_all(cases: list[str], modes: list[str], processes: int = 2, kinds: tuple[str, str] = ("truth", "sim"),
            ) -> dict[tuple[str, str, str], Any]:
    """``{(kind, case, mode): peak bytes | simulation dict | error string}``; ``kinds`` are
    ``("truth", "sim")`` (modes: training, inference) or ``("recipe_truth", "recipe_sim")`` (modes:
    the training recipes of :mod:`testkit.training_truth`)."""
    return run_jobs([(kind, c, m) for c in cases for m in modes for kind in kinds], processes)


MEASURED = ("truth", "recipe_truth")  # the kinds of job that measure a real run: each in a fresh forked process


def measured_there_simulated_here(ctx: Any, work: Callable[[Job], tuple[Job, Any]], jobs: Sequence[Job], processes: int,
                                  ) -> dict[Job, Any]:
    """``{job: work(job)[1]}``: the jobs whose kind (``job[0]``) is in :data:`MEASURED` each in a fresh process of a
    ``ctx`` pool (one task per child), the others (simulations) in this process, one after another, while the pool
    measures."""
    measured = [job for job in jobs if job[0] in MEASURED]
    simulated = [job for job in jobs if job[0] not in MEASURED]
    if not measured:
        return _simulated_here(work, simulated)
    with ctx.Pool(min(processes, len(measured)), maxtasksperchild=1) as pool:
        pending = pool.map_async(work, measured, chunksize=1)  # a task per job: maxtasksperchild counts chunks
        found = _simulated_here(work, simulated)
        found.update(pending.get())
    return found


def _simulated_here(work: Callable[[Job], tuple[Job, Any]], jobs: Sequence[Job]) -> dict[Job, Any]:
    """``work`` of each job in this process (a simulation's result does not depend on the process's logging:
    estimator.peak.sim.library_logs, tests/test_library_logs.py)."""
    return dict(work(job) for job in jobs)


def run_jobs(jobs: list[tuple[str, str, str]], processes: int = 2) -> dict[tuple[str, str, str], Any]:
    """Run ``(kind, case, mode or recipe)`` jobs: each measurement in its own fresh forked process, the simulations
    in this process meanwhile (see :func:`run_all`)."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    return measured_there_simulated_here(ctx, _run, jobs, processes)


def run_truth_jobs(module: str, jobs: list[tuple[str, str, str]], processes: int) -> dict[tuple[str, str, str], Any]:
    """``(truth | sim, case, mode)`` jobs of a truth module (``testkit.sam_truth``, ``testkit.vision_truth``) that has
    ``measure(case, mode)`` and ``simulate(case, mode)``: each measurement in its own fresh process forked from a
    server that has imported torch, transformers, ``estimator.peak`` and the module, the simulations in this process
    meanwhile; ``{job: result | error string}``."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "transformers", "estimator.peak", module])
    return measured_there_simulated_here(ctx, functools.partial(_truth_job, module), jobs, processes)


def _truth_job(module: str, job: tuple[str, str, str]) -> tuple[tuple[str, str, str], Any]:
    kind, case, mode = job
    truth = importlib.import_module(module)
    try:
        value: Any = truth.measure(case, mode) if kind == "truth" else truth.simulate(case, mode)
    except Exception as exc:  # noqa: BLE001 - reported by the test or bench that needs it
        value = f"{type(exc).__name__}: {exc}"
    return job, value
