"""Benchmark: pre-quantized checkpoints (compressed-tensors W4A16 and FP8, fine-grained fp8, MXFP4, torchao), simulated CPU peak vs
the CPU allocator's measured peak.

``python -m bench.prequant_accuracy [--out bench/results/prequant_accuracy.md] [--only CASE[,CASE]] [--kinds KIND[,KIND]]``
from the repository root. Every kind of ``testkit/prequant_truth.py`` on every causal LM of
``testkit/quant_truth.py`` (MXFP4 on the gpt-oss cases of ``testkit/prequant_truth.py``): the checkpoint quantized
for real on CPU, loaded with ``from_pretrained`` and run with
``generate`` (prefill + 32 tokens), each in a fresh process, against ``simulate_peak(..., device="cpu")`` with the
checkpoint's ``quantization_config`` (:mod:`estimator.peak.sim.prequant`). Errors are (simulated - measured) /
measured. ``--only`` / ``--kinds`` run those and write nothing.
"""

from __future__ import annotations

import sys

import compressed_tensors
import torch
import torchao
import transformers

from bench._truth_rows import truth_bench_main
from testkit import prequant_truth
from testkit.prequant_truth import MXFP4_CASES, cases_for
from testkit.quant_truth import QUANT_CASES

CASES = (*QUANT_CASES, *MXFP4_CASES)
# compressed-tensors targets nn.Linear: GPT-2's Conv1D layers stay unquantized (and lm_head is ignored), so
# its compressed-tensors checkpoints quantize nothing; the fp8 layout quantizes nn.Linear too.
NOTHING_QUANTIZED = ("gpt2",)
KNOWN = [
    "mistral_swa, qwen2_swa and opt missed by -3.9% / -5.7% in all three kinds before torch 2.14's CPU flash-attention",
    "buffers were modelled (the packed K/V and transpose buffers, estimator/peak/kernels/cpu/flash.py): the gap was in",
    "these models' generate, not in the pre-quantized layers. mixtral_moe ct_w4a16: the real run fails (from_pretrained",
    "raises in transformers 5.23's weight conversion of its MoE experts), so there is no truth.",
]


def main(argv: list[str] | None = None) -> int:
    return truth_bench_main(
        argv, name="prequant_accuracy", doc=__doc__, truth=prequant_truth, cases=CASES,
        keep=lambda case, kind: case not in NOTHING_QUANTIZED and case in cases_for(kind),
        title="Pre-quantized checkpoints: simulated peak vs measured on CPU",
        versions=f"torch {torch.__version__}, transformers {transformers.__version__}, compressed-tensors "
                 f"{compressed_tensors.__version__}, torchao {torchao.__version__}",
        about="Each case: the tiny model quantized for real on CPU and saved as the kind's checkpoint, loaded with "
              "`from_pretrained(dtype=torch.bfloat16)` and run with `generate` (prefill + 32 new tokens) under "
              "`torch.profiler` (testkit/prequant_truth.py), against the simulation from the config alone.",
        notes=[*KNOWN, "",
               "Kinds: ct_w4a16 = compressed-tensors pack-quantized int4 (groups of 32; llm-compressor's GPTQ / W4A16 "
               "layout); ct_fp8 = compressed-tensors naive-quantized float8_e4m3fn weights per channel (FP8 W8A16); fp8_block = "
               "transformers' FineGrainedFP8 layout (DeepSeek-V3/R1's), which transformers dequantizes on CPU while loading; "
               "mxfp4 = gpt-oss's MoE experts as MXFP4 blocks and scales (gpt_oss, gpt_oss_swa only), which transformers "
               "dequantizes on CPU while loading; ao_int8 = torchao Int8WeightOnlyConfig (per row), ao_int4 = torchao "
               "IntxWeightOnlyConfig int4 (groups of 32, unpacked_to_int8), quantized by torchao through transformers' "
               "TorchAoConfig and saved with save_pretrained.",
               "gpt2 is left out: its Conv1D layers are not nn.Linear, so neither format quantizes anything in it.", "",
               *CUDA_ONLY])


CUDA_ONLY = [
    "## Schemes with CUDA-only kernels (not measured here)",
    "",
    "- fp8 (fine-grained, `quant_method: fp8`) on `--device cuda`: FP8Linear keeps the float8 weights and float32 "
    "block scales as stored (exact); the finegrained-fp8 kernel is modelled from transformers 4.57 "
    "`src/transformers/integrations/finegrained_fp8.py` (`FP8Linear.forward`): `act_quant` allocates "
    "`torch.empty_like(x, dtype=torch.float8_e4m3fn)` (M x K bytes) and `x.new_empty(..., K // block_k, "
    "dtype=torch.float32)`; `w8a8_block_fp8_matmul_triton` allocates `C = A.new_empty(M x N, output_dtype)`; "
    "`output + bias` and `torch.nan_to_num(output)` one output-sized copy each; the Triton kernel keeps its "
    "accumulators in registers. MoE experts' grouped call (kernels-community finegrained-fp8, source not in "
    "transformers' tree) is assumed to allocate the same.",
    "  DeepSeek-R1 (tests/hub_data fixture, config only), `--mode inference --device cuda --dtypes float8 "
    "--batch-size 1 --seq-len 1024 --max-new-tokens 32`: float8 row 626.92 GiB of weights as stored, peak 627.48 GiB.",
    "- mxfp4 on `--device cuda` (estimator/peak/sim/prequant_mxfp4.py): the experts' uint8 blocks and scales as "
    "stored (triton_kernels StridedLayout, an A100 assumed) and float32 biases; per MoE layer the routing's gate "
    "scales and indices (gpt_oss_triton_kernels routing.py SortTokens.forward) and each matmul_ogs call's output "
    "and split-k scratchpad (matmul_ogs.py init_allocation, opt_flags.py make_default_opt_flags_nvidia), from "
    "huggingface/kernels-community's gpt-oss-triton-kernels (the Hub kernel transformers loads).",
    "  gpt-oss-20b (tests/data/vllm_runs/configs/openai__gpt-oss-20b, config only), `--mode inference --device cuda "
    "--dtypes bfloat16 --batch-size 1 --seq-len 1024 --max-new-tokens 32`: weights 12.83 GiB, peak 13.29 GiB.",
    "- GPTQ / AWQ on CPU and their other kernels (ExLlama v2, Triton): not simulated (their rows keep the stored load "
    "figures and a null peak with a note).",
    "- torchao Int4WeightOnlyConfig `tile_packed_to_4d` on `--device cuda` (bfloat16): torchao's own Int4TilePackedTo4dTensor "
    "built on fakes, its linear through `aten._weight_int4pack_mm`'s meta kernel; PyTorch `aten/src/ATen/native/cuda/int4mm.cu` "
    "`_weight_int4pack_mm_cuda` allocates only `C_final = at::empty({m, n})`. Other Int4WeightOnlyConfig formats (plain / "
    "preshuffled: mslk; plain_int32: XPU / NPU) and tile_packed_to_4d on CPU (no CPU kernel): a null peak with the reason.",
]


if __name__ == "__main__":
    sys.exit(main())
