"""The allocator's peak of tests/test_attn_implementation.py's Llama run for real with one attention kernel.

``measure(kernel, mode)`` (``kernel``: transformers' ``attn_implementation``, eager or sdpa) builds the 2-layer,
4-head Llama of ``CONFIG`` in float32 with that kernel inside ``testkit.peak_truth.measure_workload`` (torch.profiler,
the model built inside the profile) on a ``SEQ``-token prompt. Call it in a fresh process:
``testkit.peak_pool.run_truth_jobs("testkit.attn_truth", [("truth", kernel, mode), ...])`` forks one per job.
"""

from __future__ import annotations

import torch
import transformers

from testkit.peak_truth import measure_workload

CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
          "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000,
          "max_position_embeddings": 4096}
SEQ = 1024


def measure(kernel: str, mode: str) -> int:
    kwargs = {k: v for k, v in CONFIG.items() if k not in ("architectures", "model_type")}
    config = transformers.LlamaConfig(**kwargs)

    def build() -> torch.nn.Module:
        return transformers.LlamaForCausalLM._from_config(config, dtype=torch.float32, attn_implementation=kernel)

    return measure_workload(build, mode, batch_size=1, seq_len=SEQ).peak_bytes
