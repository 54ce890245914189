"""Simulated CPU peaks of small vision models (``testkit.vision_truth``'s cases) against the allocator.

Each case is a small model (most: the coverage bench's small config of its type) fed its own processor's
inputs (``estimator.peak.inputs.vision.models`` / ``vision_more``), inference (one ``no_grad`` forward) and training
(two AdamW steps); each measurement and each simulation in a fresh process. Writes
``bench/results/vision_accuracy.md``; a run of some cases replaces their rows and keeps the others'.

    .venv/bin/python -m bench.vision_accuracy                  # issue 23's newly simulated types
    .venv/bin/python -m bench.vision_accuracy uvdoc levit_b2   # these cases only
    .venv/bin/python -m bench.vision_accuracy --smoke           # one simulation, nothing written (CI)
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from testkit.vision_truth import CASES, run_jobs, simulate

OUT = Path(__file__).parent / "results" / "vision_accuracy.md"
ISSUE_23 = ["videomae", "lw_detr", "rf_detr", "depth_pro", "uvdoc", "efficientnet", "grounding-dino", "oneformer", "mask2former",
            "levit_b2", "efficientloftr", "vjepa2"]
_HEAD = ["# Vision peaks: simulated vs the CPU allocator", "",
         "`.venv/bin/python -m bench.vision_accuracy [CASE...]` (each run in a fresh process; truth: torch.profiler's "
         "\"Total Allocated\" maximum over the work, the model built inside the profile; inference = one `no_grad` forward, "
         "training = two AdamW steps). Cases: `testkit/vision_truth.py` (most are the coverage bench's small configs).", "",
         "| case | mode | batch | image px | measured (bytes) | simulated (bytes) | error |",
         "|---|---|---:|---|---:|---:|---:|"]


def main(argv: list[str] | None = None) -> int:
    cases = list(sys.argv[1:] if argv is None else argv) or ISSUE_23
    if cases == ["--smoke"]:  # one simulation of the first case, here, no measurement, nothing written
        sim = simulate(ISSUE_23[0], "inference")
        print(f"smoke: {ISSUE_23[0]} inference simulated {sim['peak_bytes']:,} B ({sim['method']})")
        return 0 if sim["method"] == "simulated" else 1
    start = time.perf_counter()
    results = run_jobs([(kind, case, mode) for case in cases for mode in ("inference", "training") for kind in ("truth", "sim")])
    rows = []
    for case in cases:
        spec = CASES[case]
        for mode in ("inference", "training"):
            truth, sim = results[("truth", case, mode)], results[("sim", case, mode)]
            size = spec.image_size or "processor's"
            if isinstance(truth, int) and isinstance(sim, dict) and sim["method"] == "simulated":
                error = (sim["peak_bytes"] - truth) / truth
                rows.append(f"| {case} | {mode} | {spec.batch_size} | {size} | {truth:,} | {sim['peak_bytes']:,} | {error:+.2%} |")
            else:
                why = truth if not isinstance(truth, int) else sim if not isinstance(sim, dict) else sim["notes"][0]
                rows.append(f"| {case} | {mode} | {spec.batch_size} | {size} | failed | {str(why)[:200]} | |")
    old = OUT.read_text().splitlines() if OUT.exists() else []
    kept = [line for line in old if line.startswith("| ") and not line.startswith(("| case ", "|---")) and line.split(" | ")[0][2:] not in cases]
    table = kept + rows
    within = sum(1 for line in table if line.endswith("% |") and abs(float(line.rstrip(" |").rsplit("| ", 1)[-1].rstrip("%"))) <= 2.0)
    lines = [*_HEAD, *table, "", f"{within} of {len(table)} rows within 2% (last run: {', '.join(cases)}, "
             f"{time.perf_counter() - start:.0f} s on this machine)."]
    print("\n".join(lines))
    OUT.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
