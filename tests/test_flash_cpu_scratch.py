"""PyTorch's CPU flash attention: the buffers ``estimator.peak.kernels.cpu.flash`` says it allocates, against the allocator.

The kernel's allocations inside ``_scaled_dot_product_flash_attention_for_cpu`` (everything but its output and
log-sum-exp), read from ``torch.profiler``'s memory events, must equal the model's to the byte: float32, bfloat16 and
float16, with and without a mask, causal, grouped key/value heads, an odd head size, short and long queries. Where this
CPU's oneDNN packs bfloat16 operands (AMX) the bfloat16 cases hold the packed K and V too; elsewhere they do not, and
the model says the same (the comparison holds on either). The rule itself is pinned by a hand count below.
"""

from __future__ import annotations

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from estimator.peak.kernels.cpu import flash
from estimator.peak.kernels.cpu.isa import target_threads

SHAPES = [  # dtype, batch, heads, kv heads, query length, key length, head size, mask, causal
    (torch.float32, 2, 4, 4, 64, 64, 16, True, False),
    (torch.bfloat16, 2, 4, 4, 64, 64, 16, True, False),
    (torch.bfloat16, 2, 4, 4, 64, 64, 16, False, False),
    (torch.bfloat16, 1, 8, 2, 200, 200, 15, False, True),
    (torch.bfloat16, 3, 2, 2, 800, 600, 64, True, False),
    (torch.bfloat16, 2, 4, 4, 1, 97, 16, False, False),
    (torch.float16, 1, 8, 2, 64, 97, 16, True, False),
]


def _measured(dtype: torch.dtype, b: int, h: int, kvh: int, lq: int, lk: int, d: int, mask: bool, causal: bool) -> tuple[int, int]:
    torch.manual_seed(0)
    q, k, v = torch.randn(b, h, lq, d, dtype=dtype), torch.randn(b, kvh, lk, d, dtype=dtype), torch.randn(b, kvh, lk, d, dtype=dtype)
    m = torch.zeros(b, 1, lq, lk, dtype=dtype) if mask else None
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=causal, enable_gqa=kvh != h)
    (op,) = [e for e in prof.events() if e.name == "aten::_scaled_dot_product_flash_attention_for_cpu"]
    allocated = sum(c.cpu_memory_usage for c in op.cpu_children if c.cpu_memory_usage > 0)
    kernel = allocated - out.numel() * out.element_size() - b * h * lq * 4  # less the output and the float32 log-sum-exp
    return kernel, flash.flash_attention_scratch((q, k, v, 0.0, causal)).with_outputs


@pytest.mark.parametrize("shape", SHAPES, ids=[f"{s[0]}-{'x'.join(map(str, s[1:7]))}{'-mask' if s[7] else ''}{'-causal' if s[8] else ''}"
                                               for s in SHAPES])
def test_flash_attention_buffers_match_the_allocator(shape: tuple) -> None:
    measured, modelled = _measured(*shape)
    assert modelled == measured


def test_packed_bfloat16_rule_by_hand(monkeypatch: pytest.MonkeyPatch) -> None:
    """bfloat16 2 x 4 heads x 64 x 16 on 2 threads where oneDNN packs (AMX), as measured on such a CPU: the float32
    block per thread, the bfloat16 probabilities per thread, K and V packed, the transpose buffer per thread."""
    monkeypatch.setattr(flash, "could_pack", lambda dtype: True)
    with torch.device("meta"):
        q = torch.empty(2, 4, 64, 16, dtype=torch.bfloat16)
    with target_threads(2):
        packed = flash.flash_attention_scratch((q, q, q, 0.0, False)).with_outputs
        short = flash.flash_attention_scratch((q[:, :, :32], q, q, 0.0, False)).with_outputs  # under 64 queries: no packing
    buf = 2 * (32 * 64 + 2 * 32 + 32 * 16) * 4
    assert packed == buf + 2 * 32 * 64 * 2 + 2 * (2 * 4 * 16 * 64 * 2) + 2 * 64 * 16 * 2 == 66_048
    assert short == buf + 2 * 32 * 64 * 2
