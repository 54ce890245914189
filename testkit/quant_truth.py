"""The CPU allocator's real peak of bitsandbytes int8 / int4 models, written as a user's script writes it.

``python -m testkit.quant_truth CASE KIND`` prints one JSON line with ``peak_bytes``: the maximum "Total
Allocated" of ``torch.profiler``'s memory events inside the work's window (run it in a fresh process). The tiny
model of the case (:mod:`testkit.peak_cases`) is saved with ``save_pretrained`` before profiling; inside the
profiled region it is loaded with ``from_pretrained(tmp, quantization_config=BitsAndBytesConfig(...),
dtype=torch.bfloat16)`` (real quantization on CPU), then, in the window:

- ``int4_generate`` / ``int8_generate``: ``generate(input_ids, max_new_tokens=32, min_new_tokens=32)``
  (greedy) in eval mode: prefill and 32 decode steps. int4: nf4, ``bnb_4bit_compute_dtype=torch.bfloat16``;
  int8: ``load_in_8bit`` with transformers' default threshold 6.0. The int8 run checks that no input column
  reached the threshold (the simulation assumes none; the run raises otherwise);
- ``int8_lora``: ``prepare_model_for_kbit_training``, ``get_peft_model(LoraConfig(r=8))``, two steps of
  ``torch.optim.AdamW`` under ``torch.autocast("cpu", torch.bfloat16)`` (as :mod:`testkit.qlora_truth`).

Nothing here calls the estimator's quantization code; :func:`simulate` is the estimator's answer.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import bitsandbytes  # noqa: F401 - imported by the pool's server (testkit.peak_pool.run_truth_jobs), not each child
import peft  # noqa: F401
import torch

from testkit.checkpoint_truth import answer, checkpoint_peak, generate_window, lora_window, meta_bf16
from testkit.peak_cases import _SMALL, CASES, PeakCase, _hf

_WORK = "quant_work"
NEW_TOKENS = 32
LORA_RANK = 8
LORA_SEQ_LEN = 128
KINDS = ("int4_generate", "int8_generate", "int8_lora")


# The causal LMs of testkit.peak_cases and two more layouts (fused qkv / gate_up; biases everywhere).
QUANT_CASES: dict[str, PeakCase] = {
    **{name: CASES[name] for name in ("llama_gqa", "llama_tied", "mistral_swa", "qwen2_swa", "mixtral_moe", "gemma_mqa", "gpt2")},
    "phi3": PeakCase("phi3", "fused qkv_proj and gate_up_proj", _hf("Phi3ForCausalLM", "Phi3Config", num_key_value_heads=2,
                                                                    pad_token_id=0, **_SMALL)),
    "gemma_gqa": PeakCase("gemma_gqa", "gemma with 2 kv heads (bitsandbytes' CPU 4-bit repacking needs 32 | out_features)",
                          _hf("GemmaForCausalLM", "GemmaConfig", num_key_value_heads=2, head_dim=16, **_SMALL)),
    "qwen3": PeakCase("qwen3", "q/k norms", _hf("Qwen3ForCausalLM", "Qwen3Config", num_key_value_heads=2, head_dim=16, **_SMALL)),
    "opt": PeakCase("opt", "biases, learned positions, ReLU", _hf("OPTForCausalLM", "OPTConfig", hidden_size=64, ffn_dim=128,
                                                                 word_embed_proj_dim=64, num_hidden_layers=2,
                                                                 num_attention_heads=4, vocab_size=1000,
                                                                 max_position_embeddings=256)),
}


def _bits(kind: str) -> int:
    return 4 if kind.startswith("int4") else 8


def _config(kind: str) -> Any:
    from transformers import BitsAndBytesConfig

    if _bits(kind) == 4:
        return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_compute_dtype=torch.bfloat16, bnb_4bit_quant_type="nf4")
    return BitsAndBytesConfig(load_in_8bit=True)


def measure(case_name: str, kind: str) -> dict[str, int]:
    import bitsandbytes as bnb
    from peft import prepare_model_for_kbit_training
    from transformers import AutoModelForCausalLM

    case = QUANT_CASES[case_name]

    def write(folder: str) -> None:
        torch.manual_seed(0)
        case.build().save_pretrained(folder)  # type: ignore[operator]  # a transformers model

    def load(folder: str) -> Any:
        return AutoModelForCausalLM.from_pretrained(folder, quantization_config=_config(kind), dtype=torch.bfloat16)

    def run(model: Any) -> None:
        if kind == "int8_lora":
            lora_window(model, case.batch_size, LORA_SEQ_LEN, _WORK, rank=LORA_RANK, prepare=prepare_model_for_kbit_training)
            return
        generate_window(model, case, NEW_TOKENS, _WORK)
        outliers = [m.state.idx for m in model.modules() if isinstance(m, bnb.nn.Linear8bitLt)
                    and m.state.idx is not None and m.state.idx.numel()]
        if outliers:
            raise AssertionError(f"{len(outliers)} int8 layers met outlier columns; the simulation assumes none")

    return checkpoint_peak(write, load, run, _WORK)


def simulate(case_name: str, kind: str, device: str = "cpu") -> dict[str, Any]:
    """The estimator's simulation of the same run (the case built on meta in bfloat16, the bitsandbytes recipe)."""
    from estimator.peak import simulate_peak
    from estimator.peak.sim.training import Recipe

    case = QUANT_CASES[case_name]
    model = meta_bf16(case)
    if kind == "int8_lora":
        recipe = Recipe(optimizer="adamw", autocast_dtype=torch.bfloat16, lora_rank=LORA_RANK, kbit=True, kbit_bits=8)
        result = simulate_peak(model, mode="training", device=device, batch_size=case.batch_size,  # type: ignore[arg-type]
                               seq_len=LORA_SEQ_LEN, recipe=recipe)
    else:
        result = simulate_peak(model, mode="inference", device=device, batch_size=case.batch_size,  # type: ignore[arg-type]
                               seq_len=case.seq_len, max_new_tokens=NEW_TOKENS,
                               recipe=Recipe(kbit=True, kbit_bits=_bits(kind)))
    return answer(result)


if __name__ == "__main__":
    print(json.dumps(measure(sys.argv[1], sys.argv[2])))
