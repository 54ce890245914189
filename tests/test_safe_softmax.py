"""``scaled_dot_product_attention``'s math path on CPU (an attention mask that needs a gradient: SAM's relative-position
bias in training) against the CPU allocator: its ``_safe_softmax`` holds a bool mask of its input and one bool per
row beside its output (:func:`estimator.peak.kernels.cpu.flash.safe_softmax_scratch`), invisible to the fakes.

Truth: ``torch.profiler``'s "Total Allocated" maximum over two AdamW steps, in a fresh process, the module built inside
the profile (as ``tests/test_module_ground_truth.py`` measures).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from estimator.modules.estimate import estimate_module

ROOT = Path(__file__).resolve().parents[1]
SHAPE = (2, 2, 384, 16)  # batch, heads, positions, head size: a 2x2x384x384 softmax


class BiasedAttention(nn.Module):
    """Self-attention of its input with a learned additive bias: the mask needs a gradient, so the math path runs."""

    def __init__(self) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(1, SHAPE[1], SHAPE[2], SHAPE[2]))
        self.proj = nn.Linear(SHAPE[3], SHAPE[3])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q = self.proj(x)  # a bias per sample, as SAM's decomposed relative positions are (made from the queries)
        return nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=q[..., :1] + self.bias)


_MEASURE = """
import json, torch
from torch.profiler import ProfilerActivity, profile, record_function
from tests.test_safe_softmax import SHAPE, BiasedAttention
from testkit.peak_truth import train_or_infer
from testkit.truth import trace_events, window_peak
torch.manual_seed(0)
with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True) as prof:
    model = BiasedAttention()
    x = torch.randn(SHAPE)
    with record_function("work"):
        train_or_infer(model, x, "training", lambda m, i: m(i).sum(), lambda m, i: m(i))
    del model, x
ops = {e.key for e in prof.key_averages()}
print(json.dumps({"peak": window_peak(trace_events(prof), "work"), "math": "aten::_safe_softmax" in ops}))
"""


def _simulated() -> int:
    row = estimate_module(BiasedAttention().to("meta"), SHAPE, device="cpu", mode="training").to_dataframe().iloc[0]
    return int(row["peak_bytes"])


def test_math_attention_softmax_masks_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    run = subprocess.run([sys.executable, "-c", _MEASURE], cwd=ROOT, capture_output=True, text=True, check=True)
    truth = json.loads(run.stdout.strip().splitlines()[-1])
    assert truth["math"]  # the kernel measured is the one modelled
    simulated = _simulated()
    assert abs(simulated - truth["peak"]) <= 64, (simulated, truth["peak"])
    # without the masks the fakes miss them at the peak (the forward's softmax): the bool mask (1 B an element) and
    # its rows' all (1 B a row)
    import estimator.peak.sim.steps as steps
    from estimator.peak.kernels.cpu.flash import SAFE_SOFTMAX

    full = steps.cpu_workspace
    monkeypatch.setattr(steps, "cpu_workspace", lambda func, args, out: None if func is SAFE_SOFTMAX else full(func, args, out))
    masks = 2 * 2 * 384 * 384 + 2 * 2 * 384
    assert truth["peak"] - _simulated() > 0.99 * masks
