"""Collect the FSDP2 truths for ``bench/fsdp_accuracy.py``: ``python -m bench.fsdp_truth_grid [--runs 5]``.

Every (case, recipe) of :data:`bench.fsdp_accuracy.CASES` x ``testkit.fsdp_truth.RECIPES`` is run
``--runs`` times under ``torchrun --nproc_per_node 2`` (gloo, CPU; ``testkit/fsdp_truth.py``) and
the per-run rank peaks are written to ``bench/results/fsdp_truth.json`` (the measurements take
~15 s a run on a 2-core machine; the accuracy table is then computed from them). ``--smoke``: one run of one case
(gpt2) and recipe, into a temporary file.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from testkit.fsdp_truth import RECIPES, run

CASES = ("gpt2", "llama_gqa", "bert_mlm", "t5", "bart")
TRUTH_FILE = Path("bench/results/fsdp_truth.json")


def main(argv: list[str] | None = None) -> int:
    import tempfile

    from bench._smoke import SMOKE_HELP

    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", type=Path, default=TRUTH_FILE)
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = parser.parse_args(argv)
    cases, recipes = CASES, tuple(RECIPES)
    if args.smoke:
        cases, recipes, args.runs = ("gpt2",), recipes[:1], 1
        args.out = Path(tempfile.mkdtemp(prefix="fsdp_smoke_")) / "truth.json"
    found = json.loads(args.out.read_text()) if args.out.exists() else {}
    for case in cases:
        for recipe in recipes:
            key = f"{case}/{recipe}"
            done = found.get(key, [])
            if len(done) >= args.runs:
                continue
            found[key] = done + run(case, recipe, args.runs - len(done))
            args.out.write_text(json.dumps(found, indent=1) + "\n")
            print(key, found[key], flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
