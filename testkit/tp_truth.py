"""What each rank of transformers' own tensor-parallel load holds, for checking the TP simulation.

Run under ``torchrun --nproc_per_node N -m testkit.tp_truth MODEL_DIR OUT_JSON`` (gloo, CPU):
every rank loads the saved model with ``from_pretrained(tp_plan="auto")``, runs one prefill
(``use_cache=True``, ``logits_to_keep=1``, batch 2 x 64) under ``no_grad``, and reports the bytes
of its local parameter shards and buffers and of its KV cache, counted on the real tensors, and
the profiler's "Total Allocated" peak of the prefill window. Rank 0 writes all ranks' figures.
``run(model_dir, nproc)`` saves nothing; ``save_tiny_llama(path)`` writes the test model.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from typing import Any

import torch

BATCH, SEQ = 2, 64
TINY_LLAMA = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  vocab_size=1000, max_position_embeddings=256)


def save_tiny_llama(path: str) -> None:
    import transformers

    torch.manual_seed(0)
    transformers.LlamaForCausalLM(transformers.LlamaConfig(**TINY_LLAMA)).save_pretrained(path)


def _main(model_dir: str, out: str) -> None:
    import torch.distributed as dist
    import transformers
    from torch.profiler import ProfilerActivity, profile, record_function

    from testkit.truth import trace_events, window_peak

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, tp_plan="auto", dtype=torch.float32)
        model.eval()
        ids = torch.zeros(BATCH, SEQ, dtype=torch.long)
        with record_function("prefill"), torch.no_grad():
            output = model(input_ids=ids, use_cache=True, logits_to_keep=1)
    weights = sum(getattr(p, "_local_tensor", p).numel() * p.element_size() for p in model.parameters())
    weights += sum(b.numel() * b.element_size() for b in model.buffers())
    kv = sum(t.numel() * t.element_size() for layer in output.past_key_values.layers for t in (layer.keys, layer.values))
    mine = {"weights": weights, "kv_cache": kv, "prefill_peak": window_peak(trace_events(prof), "prefill")}
    found: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(found, mine)
    if dist.get_rank() == 0:
        with open(out, "w") as handle:
            json.dump(found, handle)
    dist.destroy_process_group()


def run(model_dir: str, nproc: int = 2, timeout: float = 300.0) -> list[dict[str, int]]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TRANSFORMERS_VERBOSITY": "error"}
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "tp.json")
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc),
               "-m", "testkit.tp_truth", model_dir, out]
        done = subprocess.run(["nice", *cmd], env=env, timeout=timeout, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"torchrun failed ({done.returncode}): {done.stderr[-3000:]}")
        with open(out) as handle:
            return list(json.load(handle))


if __name__ == "__main__":
    _main(sys.argv[1], sys.argv[2])
    # Leave without the interpreter's teardown: a gloo or profiler thread still joinable at exit can abort
    # the process ("terminate called without an active exception") after the results are written.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
