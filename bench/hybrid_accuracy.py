"""Benchmark: hybrid and SSM decoders, simulated peak vs the measured CPU peak.

``python -m bench.hybrid_accuracy [--out bench/results/hybrid_accuracy.md]`` from the repository root.
Every case of ``testkit/hybrid_truth.py`` (Mamba, Mamba2, Jamba, Falcon-H1, Bamba, GraniteMoeHybrid,
Qwen3-Next, LFM2; two sequence lengths each) in both modes: the CPU allocator's peak of the real
``generate`` (prefill + 7 decode steps) or of two AdamW steps, each in a fresh process with the
model built inside the profiled region, against ``simulate_peak(..., device="cpu")``. Errors are
(simulated - measured) / measured. ``--only FAMILY[,FAMILY]`` runs those families and writes nothing;
``--smoke`` runs the first case in inference only and writes nothing (CI).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
import transformers

from testkit.hybrid_truth import HYBRID_CASES, run_all

MODES = ["inference", "training"]


def main(argv: list[str] | None = None) -> int:
    from bench._smoke import SMOKE_HELP

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench/results/hybrid_accuracy.md"))
    parser.add_argument("--only", default=None)
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = parser.parse_args(argv)
    cases = list(HYBRID_CASES)
    modes = MODES
    if args.only:
        cases = [c for c in cases if c.rsplit("_", 1)[0] in args.only.split(",")]
    if args.smoke:
        cases, modes = cases[:1], ["inference"]
    start = time.perf_counter()
    results = run_all(cases, modes)
    seconds = time.perf_counter() - start
    lines = [
        "# Hybrid and SSM decoders: simulated peak vs measured on CPU", "",
        f"torch {torch.__version__}, transformers {transformers.__version__}; produced by `python -m bench.hybrid_accuracy` "
        f"({seconds:.0f} s on 2 busy cores). Measured = the maximum \"Total Allocated\" of torch.profiler's memory events "
        "while the work runs, in a fresh process with the model built inside the profiled region (`testkit/hybrid_truth.py`). "
        "Inference = `generate(max_new_tokens=8, min_new_tokens=8)` (prefill and decode with the model's own cache); "
        "training = two AdamW steps in float32. Batch 2, hidden 32, 2 layers, vocab 1000. Components at the simulated peak; "
        "the states are those alive at that instant (a layer's state is made when the layer runs).", "",
        "| case | what | mode | measured bytes | simulated bytes | error | kv_cache | conv_state | ssm_state |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    worst = 0.0
    for case in cases:
        for mode in modes:
            truth, sim = results[("truth", case, mode)], results[("sim", case, mode)]
            what = HYBRID_CASES[case].what
            if not isinstance(truth, int) or not isinstance(sim, dict):
                lines.append(f"| {case} | {what} | {mode} | {truth if not isinstance(truth, int) else truth} | {sim} | | | | |")
                continue
            error = (sim["peak_bytes"] - truth) / truth
            gap = HYBRID_CASES[case].known_gaps.get(mode)
            if not gap:
                worst = max(worst, abs(error))
            comps = sim["components"]
            mark = f" (known gap: {gap})" if gap and abs(error) > 0.02 else ""
            lines.append(f"| {case} | {what} | {mode} | {truth:,} | {sim['peak_bytes']:,} | {error:+.2%}{mark} | "
                         f"{comps.get('kv_cache', 0):,} | {comps.get('conv_state', 0):,} | {comps.get('ssm_state', 0):,} |")
            print(lines[-1], flush=True)
    lines += ["", f"Largest error outside the known gaps: {worst:.2%}."]
    if not args.only and not args.smoke:
        args.out.write_text("\n".join(lines) + "\n")
        print(f"wrote {args.out}")
    failed = any(not isinstance(results[("truth", c, m)], int) or not isinstance(results[("sim", c, m)], dict) for c in cases for m in modes)
    return 1 if args.smoke and failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
