"""Two defects found with small configs of today's families (issue 34): Whisper's bfloat16 training on the CPU target
is simulated (it fell to the formula: the oneDNN bfloat16 weight-gradient rule read a 1-D convolution as 3-D) and
within 2% of the allocator; a hybrid with no attention layer is refused in one line naming its fields."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOLERANCE = 0.02

# the truth and the simulation of testkit.multimodal_truth's tiny Whisper (30 s of audio, 16 decoder tokens),
# trained two steps in mixed precision: the float32 model's forward and loss under torch.autocast("cpu", bfloat16)
_RUN = ("import json, sys, torch\nfrom testkit import multimodal_truth as t\n"
        "fn = t.measure if sys.argv[1] == 'truth' else t.simulate\n"
        "print(json.dumps(fn('whisper', 'training', 0, 30.0, autocast=torch.bfloat16)))\n")


def _avx512() -> bool:
    from estimator.peak.kernels.cpu.onednn_bf16 import onednn_bf16

    return onednn_bf16()


def test_whisper_bfloat16_training_on_cpu_is_simulated_within_two_percent_of_the_allocator() -> None:
    """Each side in a fresh process (the house way: testkit/peak_truth.py). oneDNN's kernels are capped at plain
    AVX-512 (``ONEDNN_MAX_CPU_ISA=AVX512_CORE``), the ones estimator/peak/kernels/cpu/onednn_bf16.py models, so the figure does not
    depend on whether this CPU also has AMX (whose brgemm kernels are not modelled: -2.3% on an AMX CPU)."""
    env = {**os.environ, "ONEDNN_MAX_CPU_ISA": "AVX512_CORE", "PYTHONPATH": str(ROOT)}
    runs = {kind: subprocess.Popen([sys.executable, "-c", _RUN, kind], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True) for kind in ("truth", "sim")}
    done = {kind: proc.communicate(timeout=600) for kind, proc in runs.items()}
    for kind, (_out, err) in done.items():
        assert runs[kind].returncode == 0, f"{kind}: {err[-2000:]}"
    truth = json.loads(done["truth"][0].strip().splitlines()[-1])["peak_bytes"]
    sim = json.loads(done["sim"][0].strip().splitlines()[-1])
    assert sim["method"] == "simulated", sim["notes"]
    assert sum(sim["components"].values()) == sim["peak_bytes"]
    error = (sim["peak_bytes"] - truth) / truth
    if not _avx512() and abs(error) > TOLERANCE:
        pytest.xfail(f"bfloat16 convolutions and attention run in PyTorch's own kernels below AVX-512, not modelled ({error:+.2%})")
    assert abs(error) <= TOLERANCE, f"simulated {sim['peak_bytes']:,} vs measured {truth:,} ({error:+.2%})"


def test_the_one_dimensional_weight_gradient_rule_reads_a_conv1d() -> None:
    """The rule that raised ``not enough values to unpack (expected 3, got 1)`` on Whisper's conv1/conv2."""
    import torch

    from estimator.peak.kernels.cpu.onednn_bf16 import bf16_weight_grad_scratchpad

    with torch.device("meta"):
        x, w, g = (torch.empty(1, 64, 3000, dtype=torch.bfloat16), torch.empty(64, 64, 3, dtype=torch.bfloat16),
                   torch.empty(1, 64, 1500, dtype=torch.bfloat16))
    pad = bf16_weight_grad_scratchpad(g, x, w, [2], [1], [1], 1, [True, True, True])
    assert pad > 0 if _avx512() else pad == 0


HYBRIDS = {
    "jamba": ({"model_type": "jamba", "architectures": ["JambaForCausalLM"], "mamba_d_state": 8, "mamba_d_conv": 4,
               "mamba_expand": 2, "mamba_dt_rank": 8, "use_mamba_kernels": False, "num_experts": 2, "num_experts_per_tok": 1},
              "Mamba layers (attn_layer_period 8 (the default), attn_layer_offset 4 (the default), num_hidden_layers 2)"),
    "qwen3_next": ({"model_type": "qwen3_next", "architectures": ["Qwen3NextForCausalLM"], "head_dim": 16, "num_experts": 2,
                    "num_experts_per_tok": 1, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32,
                    "linear_num_value_heads": 4, "linear_num_key_heads": 2, "linear_key_head_dim": 16, "linear_value_head_dim": 16},
                   "linear-attention layers (full_attention_interval 4 (the default), num_hidden_layers 2)"),
}
_SMALL = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
          "vocab_size": 1000}


@pytest.mark.parametrize("family", list(HYBRIDS))
def test_a_hybrid_with_no_attention_layer_is_refused_in_one_line(family: str, tmp_path: Path) -> None:
    from estimator import estimate
    from estimator.errors import MalformedConfigError

    config, words = HYBRIDS[family]
    (tmp_path / "config.json").write_text(json.dumps({**_SMALL, **config}))
    with pytest.raises(MalformedConfigError) as caught:
        estimate(str(tmp_path), mode="inference", device="cpu", dtypes="float32")
    message = str(caught.value)
    assert "\n" not in message and words in message and "at least one attention layer" in message
    assert estimate(str(tmp_path), dtypes="float32").rows[0].total_bytes  # loading it is answered as before
    with_attention = {**_SMALL, **config, "num_hidden_layers": 5 if family == "jamba" else 4}
    (tmp_path / "config.json").write_text(json.dumps(with_attention))
    # A short sequence: Jamba's Mamba layers run transformers' reference scan one token at a time, and whether the
    # config is refused does not depend on the length.
    row = estimate(str(tmp_path), mode="inference", device="cpu", dtypes="float32", batch_size=1, seq_len=16).rows[0]
    assert row.method == "simulated"


def test_a_pure_ssm_is_not_refused(tmp_path: Path) -> None:
    """Mamba has no attention layer by design (its own cache measures the sequence; generate runs), so the rule above
    leaves it alone: a 2-layer Mamba is simulated."""
    from estimator import estimate

    config = {"model_type": "mamba", "architectures": ["MambaForCausalLM"], "hidden_size": 64, "state_size": 8,
              "num_hidden_layers": 2, "vocab_size": 1000, "use_mambapy": False}
    (tmp_path / "config.json").write_text(json.dumps(config))
    # A short sequence (the reference scan runs one token at a time; being refused or not does not depend on it).
    row = estimate(str(tmp_path), mode="inference", device="cpu", dtypes="float32", batch_size=1, seq_len=16).rows[0]
    assert row.method == "simulated" and row.peak_bytes
