"""What the benches' ``--smoke`` modes share: tiny inputs that make any bench run in seconds (CI runs them all,
``tests/test_bench_smoke.py``). Not a bench itself (the leading underscore keeps it out of that list)."""

from __future__ import annotations

import atexit
import functools
import json
import shutil
import tempfile
from pathlib import Path

SMOKE_HELP = "a few seconds on tiny inputs, nothing written to bench/results (CI runs this)"
# A Llama small enough that building and simulating it takes well under a second (2 layers, GQA, tied nothing).
TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512, "max_position_embeddings": 1024, "torch_dtype": "bfloat16",
}


@functools.cache
def tiny_llama_folder() -> Path:
    """A local model folder holding only :data:`TINY_LLAMA` as its config.json (one per process)."""
    top = tempfile.mkdtemp(prefix="bench_smoke_")
    atexit.register(shutil.rmtree, top, ignore_errors=True)
    folder = Path(top) / "tiny-llama"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY_LLAMA))
    return folder
