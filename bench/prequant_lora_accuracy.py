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

import sys

import compressed_tensors
import peft
import torch
import transformers

from bench._truth_rows import truth_bench_main
from bench.prequant_accuracy import CASES, NOTHING_QUANTIZED
from testkit import prequant_lora_truth
from testkit.prequant_lora_truth import cases_for


def main(argv: list[str] | None = None) -> int:
    return truth_bench_main(
        argv, name="prequant_lora_accuracy", doc=__doc__, truth=prequant_lora_truth, cases=CASES,
        keep=lambda case, kind: case not in NOTHING_QUANTIZED and case in cases_for(kind),
        title="LoRA training of pre-quantized checkpoints: simulated peak vs measured on CPU",
        versions=f"torch {torch.__version__}, transformers {transformers.__version__}, peft {peft.__version__}, compressed-tensors "
                 f"{compressed_tensors.__version__}",
        about="Each case: the tiny model quantized for real on CPU and saved as the kind's checkpoint, loaded with "
              "`from_pretrained(dtype=torch.bfloat16)` as transformers says to for fine-tuning (compressed-tensors: "
              "`CompressedTensorsConfig(dequantize=True)`; mxfp4: `Mxfp4Config(dequantize=True)`; fp8: dequantized on CPU "
              "anyway), `get_peft_model(LoraConfig(r=8))`, two AdamW steps under bfloat16 autocast, batch 2 x 128 tokens, "
              "under `torch.profiler` (testkit/prequant_lora_truth.py), against the simulation from the config alone.",
        notes=[*KNOWN, "", *NOT_MEASURED])


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
