"""Benchmark: LoRA training of pre-quantized checkpoints (compressed-tensors W4A16 and FP8, fine-grained fp8, MXFP4),
simulated CPU peak vs the CPU allocator's measured peak.

``python -m bench.prequant_lora_accuracy [--out bench/results/prequant_lora_accuracy.md] [--only CASE[,CASE]]
[--kinds KIND[,KIND]]`` from the repository root. Every kind of ``testkit/prequant_truth.py`` on every causal LM of
``testkit/quant_truth.py`` (MXFP4 on the gpt-oss cases): the checkpoint quantized for real on CPU and saved, loaded with
``from_pretrained`` as transformers says to load it for fine-tuning, ``get_peft_model(LoraConfig(r=8))`` and two AdamW
steps under bfloat16 autocast (``testkit/prequant_lora_truth.py``), each in a fresh process, against
``simulate_peak(..., mode="training")`` with the recipe :mod:`estimator.peak.sim.prequant_lora` gives the scheme.
Errors are (simulated - measured) / measured. ``--only`` / ``--kinds`` run those and write nothing.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import compressed_tensors
import peft
import torch
import transformers

from bench._smoke import SMOKE_HELP
from bench._truth_rows import truth_rows
from bench.prequant_accuracy import CASES, NOTHING_QUANTIZED
from testkit.peak_pool import run_truth_jobs
from testkit.prequant_lora_truth import KINDS, cases_for, simulate


def main(argv: list[str] | None = None) -> int:
    warnings.filterwarnings("ignore")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench/results/prequant_lora_accuracy.md"))
    parser.add_argument("--only", default=None)
    parser.add_argument("--kinds", default=None)
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = parser.parse_args(argv)
    if args.smoke:  # one simulation, no measurement, nothing written
        sim = simulate(CASES[0], KINDS[0])
        print(f"smoke: {CASES[0]} {KINDS[0]} simulated {sim['peak_bytes']:,} B ({sim['method']})")
        return 0 if sim["method"] == "simulated" else 1
    cases = [c for c in CASES if c not in NOTHING_QUANTIZED and (not args.only or c in args.only.split(","))]
    kinds = [k for k in KINDS if not args.kinds or k in args.kinds.split(",")]
    pairs = [(c, k) for c in cases for k in kinds if c in cases_for(k)]
    start = time.perf_counter()
    found = run_truth_jobs("testkit.prequant_lora_truth", [(side, c, k) for c, k in pairs for side in ("truth", "sim")],
                           processes=2)
    lines = ["# LoRA training of pre-quantized checkpoints: simulated peak vs measured on CPU", "",
             f"torch {torch.__version__}, transformers {transformers.__version__}, peft {peft.__version__}, compressed-tensors "
             f"{compressed_tensors.__version__}; `python -m bench.prequant_lora_accuracy` ({time.perf_counter() - start:.0f} s).", "",
             "Each case: the tiny model quantized for real on CPU and saved as the kind's checkpoint, loaded with "
             "`from_pretrained(dtype=torch.bfloat16)` as transformers says to for fine-tuning (compressed-tensors: "
             "`CompressedTensorsConfig(dequantize=True)`; mxfp4: `Mxfp4Config(dequantize=True)`; fp8: dequantized on CPU "
             "anyway), `get_peft_model(LoraConfig(r=8))`, two AdamW steps under bfloat16 autocast, batch 2 x 128 tokens, "
             "under `torch.profiler` (testkit/prequant_lora_truth.py), against the simulation from the config alone.", "",
             "| case | kind | measured bytes | simulated bytes | error |", "|---|---|---:|---:|---:|"]
    rows, worst = truth_rows(pairs, found)
    lines += rows
    lines += ["", f"Worst error: {worst:.2%}.", "", *KNOWN, "", *NOT_MEASURED]
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.only and not args.kinds:
        args.out.write_text(text)
    return 0


KNOWN = [
    "mixtral_moe: peft has no default LoRA targets for Mixtral (the real run and the simulation refuse alike, the CLI asks",
    "for --lora-targets); its ct_w4a16 load also fails in transformers 5.23's weight conversion of the MoE experts, as for",
    "inference (bench/prequant_accuracy.py), so there is no truth.",
]
NOT_MEASURED = [
    "## Not measured here",
    "",
    "- fp8 (fine-grained) on `--device cuda`: trained as stored (FP8Linear keeps its float8 weights; peft wraps it as "
    "nn.Linear): the forward's finegrained-fp8 kernel is modelled from its source as for inference "
    "(bench/prequant_accuracy.py), the backward is transformers 5.23's own `FP8LinearFunction.backward` "
    "(`integrations/finegrained_fp8.py`: `_dequantize_fp8_weight` to the gradient's dtype, then `grad_output @ weight`), "
    "run on the fakes as is.",
    "- GPTQ / AWQ (peft's GPTQ / AWQ LoRA layers over gptqmodel's kernels), fbgemm_fp8 (transformers refuses to train "
    "it) and other methods: the training row has a null peak and one line saying why.",
]


if __name__ == "__main__":
    sys.exit(main())
