"""The CPU allocator's real peak of LoRA training on pre-quantized checkpoints, loaded and trained as a user's script does.

``python -m testkit.prequant_lora_truth CASE KIND`` prints one JSON line with ``peak_bytes``: the maximum "Total
Allocated" of ``torch.profiler``'s memory events inside the training window (run it in a fresh process). The
checkpoint of the case and kind is made as :mod:`testkit.prequant_truth` makes it (quantized for real on CPU,
saved); inside the profiled region it is loaded as transformers says to load it for fine-tuning:

- ``ct_w4a16``, ``ct_fp8``: ``from_pretrained(tmp, dtype=torch.bfloat16,
  quantization_config=CompressedTensorsConfig(dequantize=True))`` (a default load of the packed W4A16 layers
  cannot take peft's LoRA: checked here, :func:`default_load_refused`);
- ``fp8_block``: ``from_pretrained(tmp, dtype=torch.bfloat16)`` (no GPU: transformers dequantizes it);
- ``mxfp4``: ``from_pretrained(tmp, dtype=torch.bfloat16, quantization_config=Mxfp4Config(dequantize=True))``;

the run checks that the loaded model is the plain one (no quantizer left), makes every tensor resident
(:func:`testkit.prequant_truth.resident`), then ``get_peft_model(model, LoraConfig(r=8))`` (peft's default targets;
:data:`TARGETS` where peft has none) and, in the window, two steps of ``torch.optim.AdamW`` under
``torch.autocast("cpu", torch.bfloat16)`` (:func:`testkit.training_truth.train_step`).

Nothing here calls the estimator's quantization code; :func:`simulate` is the estimator's answer.
"""

from __future__ import annotations

import json
import sys
import tempfile
from typing import Any

import torch

from testkit.checkpoint_truth import answer, lora_window, meta_bf16
from testkit.prequant_truth import KINDS, QUANTIZATION_CONFIGS, case_of, cases_for, make_checkpoint, prequant_peak

__all__ = ["KINDS", "LORA_RANK", "SEQ_LEN", "TARGETS", "cases_for", "default_load_refused", "measure", "simulate"]

_WORK = "prequant_lora_work"
LORA_RANK = 8
SEQ_LEN = 128
# peft has no default LoRA targets for these architectures
TARGETS: dict[str, tuple[str, ...]] = {"phi3": ("qkv_proj", "o_proj"), "gpt_oss": ("q_proj", "k_proj", "v_proj", "o_proj"),
                                       "gpt_oss_swa": ("q_proj", "k_proj", "v_proj", "o_proj")}


def _load_kwargs(kind: str) -> dict[str, Any]:
    """What ``from_pretrained`` is given beside ``dtype=torch.bfloat16`` to load ``kind`` for fine-tuning."""
    from transformers.utils.quantization_config import CompressedTensorsConfig, Mxfp4Config

    if kind.startswith("ct_"):
        return {"quantization_config": CompressedTensorsConfig(dequantize=True)}
    if kind == "mxfp4":
        return {"quantization_config": Mxfp4Config(dequantize=True)}
    return {}


def measure(case_name: str, kind: str) -> dict[str, int]:
    case = case_of(case_name)

    def run(model: Any) -> None:
        assert not getattr(model, "is_quantized", False) and getattr(model, "hf_quantizer", None) is None, kind
        lora_window(model, case.batch_size, SEQ_LEN, _WORK, rank=LORA_RANK,
                    targets=list(TARGETS[case_name]) if case_name in TARGETS else None)

    return prequant_peak(case_name, kind, run, _WORK, **_load_kwargs(kind))


def default_load_refused(case_name: str = "llama_gqa") -> str:
    """peft's refusal of a compressed-tensors W4A16 checkpoint loaded as stored (the default ``dequantize=False``):
    the error ``get_peft_model`` raises (the test checks it is peft's AttributeError on the packed layer)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    with tempfile.TemporaryDirectory() as tmp:
        make_checkpoint(case_name, "ct_w4a16", tmp)
        model = AutoModelForCausalLM.from_pretrained(tmp, dtype=torch.bfloat16)
        try:
            get_peft_model(model, LoraConfig(r=LORA_RANK))
        except AttributeError as exc:
            return str(exc)
    raise AssertionError("peft wrapped the packed layers")


def simulate(case_name: str, kind: str, device: str = "cpu") -> dict[str, Any]:
    """The estimator's simulation of the same run: the case built on meta in bfloat16 from its config alone, the
    LoRA recipe a bfloat16 row gets (``estimator.peak.rows.recipe_for``), as the checkpoint's scheme trains it
    (:func:`estimator.peak.sim.prequant_lora.training_recipe`)."""
    from estimator.peak import simulate_peak
    from estimator.peak.sim.prequant_lora import training_recipe
    from estimator.peak.sim.training import Recipe

    case = case_of(case_name)
    recipe = training_recipe(QUANTIZATION_CONFIGS[kind], device,
                             Recipe(optimizer="adamw", autocast_dtype=torch.bfloat16, lora_rank=LORA_RANK,
                                    lora_targets=TARGETS.get(case_name)))
    result = simulate_peak(meta_bf16(case), mode="training", device=device, batch_size=case.batch_size,  # type: ignore[arg-type]
                           seq_len=SEQ_LEN, recipe=recipe)
    return answer(result)


if __name__ == "__main__":
    print(json.dumps(measure(sys.argv[1], sys.argv[2])))
