"""The CPU allocator's real peak for QLoRA (bitsandbytes int4 nf4 + LoRA), written as a user's script writes it.

``python -m testkit.qlora_truth CASE [RANK]`` prints one JSON line with ``peak_bytes``: the maximum
"Total Allocated" of ``torch.profiler``'s memory events over two training steps (run it in a fresh
process). The tiny model of the case is saved with ``save_pretrained`` before profiling; inside the
profiled region it is loaded with ``BitsAndBytesConfig(load_in_4bit=True, nf4, compute bfloat16)``
in bfloat16, set up with ``prepare_model_for_kbit_training`` and ``get_peft_model(LoraConfig(r=rank))``,
and trained two steps with ``torch.optim.AdamW`` (forward and loss under
``torch.autocast("cpu", torch.bfloat16)``). Nothing here calls the estimator's training code.
"""

from __future__ import annotations

import json
import sys
import tempfile
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from testkit.training_truth import train_step
from testkit.truth import trace_events, window_peak

_WORK = "qlora_work"
SEQ_LEN = 128  # batch 2 x 128 tokens, as training_truth's text cases


def _bnb_config() -> Any:
    from transformers import BitsAndBytesConfig

    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_compute_dtype=torch.bfloat16, bnb_4bit_quant_type="nf4")


def measure(case_name: str, rank: int = 8) -> dict[str, int]:
    from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training
    from transformers import AutoModelForCausalLM

    from estimator.peak.inputs.providers import workload_for
    from testkit.peak_cases import CASES

    case = CASES[case_name]
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        case.build().save_pretrained(tmp)  # type: ignore[operator]  # a transformers model
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            model = AutoModelForCausalLM.from_pretrained(tmp, quantization_config=_bnb_config(), dtype=torch.bfloat16)
            wl = workload_for(model, batch_size=case.batch_size, seq_len=SEQ_LEN)
            inputs = wl.make_inputs()
            model = prepare_model_for_kbit_training(model)
            model = get_peft_model(model, LoraConfig(r=rank))  # type: ignore[assignment]  # the PeftModel wraps it
            model.train()
            opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
            with record_function(_WORK):
                for _ in range(2):
                    train_step(model, wl, inputs, opt, torch.bfloat16)
            del model, inputs, opt
    return {"peak_bytes": window_peak(trace_events(prof), _WORK)}



def simulate(case_name: str, rank: int = 8, device: str = "cpu") -> dict[str, Any]:
    """The estimator's simulation of the same run (the case built on meta in bfloat16, QLoRA as the recipe)."""
    from estimator.peak import simulate_peak
    from estimator.peak.sim.training import Recipe
    from testkit.peak_cases import CASES

    case = CASES[case_name]
    with torch.device("meta"):  # built in bfloat16 as from_pretrained(dtype=torch.bfloat16) builds it (inv_freq stays float32)
        built = case.build()
        model = type(built)._from_config(built.config, dtype=torch.bfloat16)  # type: ignore[attr-defined]  # a transformers model
    recipe = Recipe(optimizer="adamw", autocast_dtype=torch.bfloat16, lora_rank=rank, kbit=True)
    result = simulate_peak(model, mode="training", device=device, batch_size=case.batch_size,  # type: ignore[arg-type]
                           seq_len=SEQ_LEN, recipe=recipe)
    return {"peak_bytes": result.peak_bytes, "components": result.components, "method": result.method,
            "notes": list(result.notes)}


if __name__ == "__main__":
    print(json.dumps(measure(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 8)))
