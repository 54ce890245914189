"""The real CPU peak of small SAM-family models fed :mod:`estimator.peak.inputs.vision.sam`' inputs, against the simulation.

Measured as :mod:`testkit.vision_truth` measures (the model built for real on CPU inside
``torch.profiler.profile(profile_memory=True)``, the truth the maximum "Total Allocated" inside the window
of the work, :func:`testkit.peak_truth.run_work`: training = two steps of forward, backward,
``torch.optim.AdamW`` step and ``zero_grad(set_to_none=True)``; inference = one ``no_grad`` forward, or
for a video tracker the whole ``propagate_in_video_iterator`` loop), each measurement in a fresh forked
process. The models are the coverage bench's small configs (:func:`testkit.coverage.small_config`, the
shrinking rule of :mod:`testkit.shrink_sam`); the inputs are the workload's own: the model's transformers
processor's ``pixel_values`` and one point prompt per image.

``python -m testkit.sam_truth [CASE...]`` prints one JSON line per case and mode (truth, simulation, error)
and writes them to ``bench/results/sam_truth.jsonl``.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

RESULTS = Path(__file__).resolve().parent.parent / "bench" / "results" / "sam_truth.jsonl"


@dataclass(frozen=True)
class SamCase:
    """The coverage bench's small config of ``model_type``, fed ``batch_size`` images (or one clip) of ``image_size`` px."""

    model_type: str
    batch_size: int = 1
    image_size: int | None = None  # the raw image's side (None: the model's input size)
    modes: tuple[str, ...] = ("inference", "training")


CASES: dict[str, SamCase] = {
    "sam": SamCase("sam"),
    "sam_b2": SamCase("sam", batch_size=2, image_size=96),
    "sam_hq": SamCase("sam_hq"),
    "sam2": SamCase("sam2"),
    "sam2_b2": SamCase("sam2", batch_size=2),
    "sam3_tracker": SamCase("sam3_tracker"),
    "edgetam": SamCase("edgetam"),
    "sam_vision_model": SamCase("sam_vision_model"),
    "sam2_hiera_det_model": SamCase("sam2_hiera_det_model"),
    "sam2_vision_model": SamCase("sam2_vision_model"),
    # video trackers: inference only (transformers runs them under torch.inference_mode); batch_size = objects tracked
    "sam2_video": SamCase("sam2_video", modes=("inference",)),
    "sam2_video_2obj": SamCase("sam2_video", batch_size=2, modes=("inference",)),
    "sam3_tracker_video": SamCase("sam3_tracker_video", modes=("inference",)),
    "edgetam_video": SamCase("edgetam_video", modes=("inference",)),
}


def _config_only(model_type: str) -> Any:
    """The small config (built once outside the profiled window, so that its real build there is the only one)."""
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from testkit.coverage import small_config

    small, name, _model, _level, reason = small_config(model_type)
    if small is None:
        raise ValueError(f"{model_type}: {reason}")
    return getattr(transformers, name), CONFIG_MAPPING[model_type].from_dict(dict(small))


def measure(case_name: str, mode: str) -> int:
    """The allocator's peak of ``mode`` on the real model (see the module docstring)."""
    from testkit.peak_truth import measure_workload

    case = CASES[case_name]
    cls, config = _config_only(case.model_type)
    build = functools.partial(cls._from_config, config, dtype=torch.float32)
    return measure_workload(build, mode, batch_size=case.batch_size, image_size=case.image_size).peak_bytes


def simulate(case_name: str, mode: str) -> dict[str, Any]:
    """The simulated CPU peak of the same case and mode."""
    from estimator.peak import simulate_peak

    case = CASES[case_name]
    cls, config = _config_only(case.model_type)
    with torch.device("meta"):
        model = cls._from_config(config, dtype=torch.float32)
    r = simulate_peak(model, mode=mode, device="cpu", batch_size=case.batch_size, image_size=case.image_size)  # type: ignore[arg-type]
    return {"peak_bytes": r.peak_bytes, "method": r.method, "notes": list(r.notes)}


Job = tuple[str, str, str]  # (truth | sim, case, mode)


def run_jobs(jobs: list[Job], processes: int = 1) -> dict[Job, Any]:
    """Each job in its own fresh process forked from a server that has imported torch and transformers
    (:func:`testkit.peak_pool.run_truth_jobs`)."""
    from testkit.peak_pool import run_truth_jobs

    return run_truth_jobs("testkit.sam_truth", jobs, processes)


def main(names: list[str]) -> list[dict[str, Any]]:
    """Truth and simulation of each case and mode; the lines also go to :data:`RESULTS` (one per case and mode, replacing earlier ones)."""
    jobs = [(k, c, m) for c in names for m in CASES[c].modes for k in ("truth", "sim")]
    found = run_jobs(jobs)
    lines: list[dict[str, Any]] = []
    for c in names:
        case = CASES[c]
        for m in case.modes:
            truth, sim = found[("truth", c, m)], found[("sim", c, m)]
            error = (sim["peak_bytes"] - truth) / truth if isinstance(truth, int) and isinstance(sim, dict) and sim["peak_bytes"] else None
            lines.append({"case": c, "model_type": case.model_type, "batch_size": case.batch_size, "image_size": case.image_size,
                          "mode": m, "truth": truth, "sim": sim["peak_bytes"] if isinstance(sim, dict) else sim,
                          "method": sim.get("method") if isinstance(sim, dict) else None, "error": error,
                          "inputs": next((n for n in sim["notes"] if "pixel_values" in n), None) if isinstance(sim, dict) else None})
    kept = [json.loads(x) for x in RESULTS.read_text().splitlines() if x.strip()] if RESULTS.exists() else []
    done = {(x["case"], x["mode"]) for x in lines}
    kept = [x for x in kept if (x["case"], x["mode"]) not in done]
    RESULTS.write_text("".join(json.dumps(x) + "\n" for x in kept + lines))
    RESULTS.with_suffix(".md").write_text(table(kept + lines))
    return lines


def table(lines: list[dict[str, Any]]) -> str:
    """The results as a markdown table (``bench/results/sam_truth.md``)."""
    out = ["# SAM family: simulated peak vs the CPU allocator", "",
           "`python -m testkit.sam_truth [CASE...]` (testkit/sam_truth.py): the coverage bench's small configs, fed the "
           "processor's pixel_values and one point prompt per image (video trackers: an 8-frame session propagated; batch = "
           "objects tracked). Truth: `torch.profiler` memory events of the real run on CPU.", "",
           "| case | model type | batch | mode | truth (B) | simulated (B) | error |", "|---|---|---|---|---|---|---|"]
    for x in lines:
        error = f"{100 * x['error']:+.2f}%" if isinstance(x.get("error"), float) else "-"
        out.append(f"| {x['case']} | {x['model_type']} | {x['batch_size']} | {x['mode']} | {x['truth']} | {x['sim']} | {error} |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    import sys

    for line in main(sys.argv[1:] or list(CASES)):
        print(json.dumps({k: v for k, v in line.items() if k != "inputs"}))
