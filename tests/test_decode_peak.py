"""The decode phase (``max_new_tokens``): simulated for MoE models, and its KV-cache note.

- MoE decoders (Mixtral-, Qwen3-MoE-style; transformers 5 runs their experts with ``grouped_mm``,
  whose fake kernel takes only 16-bit inputs) in float32 on CPU: the simulated peak against the
  real ``generate``'s allocator peak (``testkit/decode_truth.py``, a fresh process each), within
  2% like the other inference cases. One case peaks in the prefill, one in the last decode step.
- The note "KV cache for the whole context" equals the context times the bytes per token computed
  here from the config, and says what the extra cache bytes at the step's peak are.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from testkit.decode_truth import DECODE_CASES

ROOT = Path(__file__).resolve().parents[1]
TOLERANCE = 0.02


def _truth(case: str) -> int:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-m", "testkit.decode_truth", case], capture_output=True, text=True,
                         env=env, cwd=ROOT, timeout=300, check=True)
    return int(json.loads(out.stdout.strip().splitlines()[-1])["peak_bytes"])


@pytest.mark.parametrize("case", list(DECODE_CASES))
def test_moe_generate_is_simulated_within_2_percent(case: str) -> None:
    from estimator.peak import simulate_peak

    c = DECODE_CASES[case]
    sim = simulate_peak(c.build_on("meta"), mode="inference", device="cpu", batch_size=c.batch_size, seq_len=c.seq_len,
                        max_new_tokens=c.max_new_tokens)
    assert sim.method == "simulated", sim.notes
    assert any(f"last decode step at context {c.seq_len + c.max_new_tokens}" in n for n in sim.notes)
    truth = _truth(case)
    error = (sim.peak_bytes - truth) / truth
    assert abs(error) <= TOLERANCE, f"{case}: simulated {sim.peak_bytes:,} vs generate {truth:,} ({error:+.2%})"


def _cache_note(notes: tuple[str, ...]) -> tuple[int, int | None]:
    note = next(n for n in notes if n.startswith("KV cache for the whole context"))
    held = int(re.search(r"decode step: ([\d,]+) bytes", note).group(1).replace(",", ""))  # type: ignore[union-attr]
    peak = re.search(r"peak ([\d,]+) bytes are cache", note)
    return held, None if peak is None else int(peak.group(1).replace(",", ""))


def test_decode_note_is_the_cache_of_the_whole_context() -> None:
    """8 alike layers (extrapolated from 2, 3, 4, as Llama-3.1-8B is): 200 prompt + 56 new tokens."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from estimator.peak import simulate_peak

    layers, kv_heads, head_dim, batch, prompt, new = 8, 2, 32, 1, 200, 56
    config = LlamaConfig(hidden_size=256, intermediate_size=512, num_attention_heads=8, num_key_value_heads=kv_heads,
                         num_hidden_layers=layers, vocab_size=1000)
    with torch.device("meta"):
        model = LlamaForCausalLM._from_config(config, dtype=torch.bfloat16)
    result = simulate_peak(model, mode="inference", device="cuda", batch_size=batch, seq_len=prompt, max_new_tokens=new)
    held, at_peak = _cache_note(result.notes)
    per_token = layers * 2 * kv_heads * head_dim * 2  # K and V, bf16
    assert held == batch * (prompt + new) * per_token
    # At the step's peak torch.cat holds one layer's old keys (the context less one token) as well.
    assert at_peak == held + batch * (prompt + new - 1) * kv_heads * head_dim * 2
