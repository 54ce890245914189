"""Run ground-truth measurements and simulations of the peak cases in fresh processes.

A ``forkserver`` pool whose server has already imported torch, transformers, timm and the case
models forks one fresh child per task (``maxtasksperchild=1``): each profiled measurement starts
with no tensor left alive by earlier profiled code, without paying the imports each time.
"""

from __future__ import annotations

import functools
import importlib
import multiprocessing as mp
from typing import Any

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


def run_jobs(jobs: list[tuple[str, str, str]], processes: int = 2) -> dict[tuple[str, str, str], Any]:
    """Run ``(kind, case, mode or recipe)`` jobs, one fresh forked process each (see :func:`run_all`)."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    with ctx.Pool(processes, maxtasksperchild=1) as pool:
        return dict(pool.imap_unordered(_run, jobs))


def run_truth_jobs(module: str, jobs: list[tuple[str, str, str]], processes: int) -> dict[tuple[str, str, str], Any]:
    """``(truth | sim, case, mode)`` jobs of a truth module (``testkit.sam_truth``, ``testkit.vision_truth``) that has
    ``measure(case, mode)`` and ``simulate(case, mode)``: each in its own fresh process forked from a server that has
    imported torch, transformers, ``estimator.peak`` and the module; ``{job: result | error string}``."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "transformers", "estimator.peak", module])
    with ctx.Pool(processes, maxtasksperchild=1) as pool:
        return dict(pool.imap_unordered(functools.partial(_truth_job, module), jobs))


def _truth_job(module: str, job: tuple[str, str, str]) -> tuple[tuple[str, str, str], Any]:
    kind, case, mode = job
    truth = importlib.import_module(module)
    try:
        value: Any = truth.measure(case, mode) if kind == "truth" else truth.simulate(case, mode)
    except Exception as exc:  # noqa: BLE001 - reported by the test or bench that needs it
        value = f"{type(exc).__name__}: {exc}"
    return job, value
