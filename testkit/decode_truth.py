"""The real peak of ``generate`` on CPU, for checking the simulated decode (``max_new_tokens``).

``python -m testkit.decode_truth CASE`` prints one JSON line: ``peak_bytes``, the maximum "Total
Allocated" of torch.profiler's memory events inside the window where
``model.generate(input_ids, attention_mask=ones, max_new_tokens=N, min_new_tokens=N, do_sample=False)`` runs on a model
built for real on CPU in float32 (its weights are in the total). Run it in a fresh process: the
profiler's total also counts what earlier profiled code left alive.

The cases are tiny MoE decoders, whose experts run ``grouped_mm`` (transformers 5's MoE path).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function

from testkit.truth import trace_events, window_peak

_WORK = "generate"

_SMALL = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
          "num_key_value_heads": 2, "vocab_size": 1000, "max_position_embeddings": 512}


@dataclass(frozen=True)
class DecodeCase:
    name: str
    build: Callable[[], nn.Module]  # under the current default device, float32
    batch_size: int = 2
    seq_len: int = 256
    max_new_tokens: int = 32

    def build_on(self, device: str) -> nn.Module:
        with torch.device(device):
            return self.build()


def _hf(cls_name: str, config_name: str, **kw: object) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        import transformers

        config = getattr(transformers, config_name)(**kw)
        return getattr(transformers, cls_name)._from_config(config, dtype=torch.float32)

    return build


DECODE_CASES: dict[str, DecodeCase] = {
    c.name: c
    for c in [
        DecodeCase("mixtral_moe", _hf("MixtralForCausalLM", "MixtralConfig", num_local_experts=4, num_experts_per_tok=2, **_SMALL)),
        DecodeCase("qwen3_moe", _hf("Qwen3MoeForCausalLM", "Qwen3MoeConfig", num_experts=4, num_experts_per_tok=2,
                                    moe_intermediate_size=96, **_SMALL)),
        # a short prompt and a long answer: the last decode step holds the peak
        DecodeCase("mixtral_moe_decode", _hf("MixtralForCausalLM", "MixtralConfig", num_local_experts=4, num_experts_per_tok=2,
                                             **_SMALL), batch_size=4, seq_len=8, max_new_tokens=200),
    ]
}


def measure(case_name: str) -> dict[str, int]:
    case = DECODE_CASES[case_name]
    torch.manual_seed(0)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        model = case.build_on("cpu").eval()
        ids = torch.randint(0, model.config.vocab_size, (case.batch_size, case.seq_len))
        with record_function(_WORK), torch.no_grad():
            # attention_mask given: else generate takes every id equal to pad_token_id for padding
            out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=case.max_new_tokens,
                                 min_new_tokens=case.max_new_tokens, do_sample=False, pad_token_id=0)
        assert out.shape[1] == case.seq_len + case.max_new_tokens
        del model, ids, out
    return {"peak_bytes": window_peak(trace_events(prof), _WORK)}


if __name__ == "__main__":
    print(json.dumps(measure(sys.argv[1])))
