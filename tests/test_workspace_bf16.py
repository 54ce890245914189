"""bfloat16 kernel scratch on CPU (:mod:`estimator.peak.kernels.cpu.workspace`) against the CPU allocator.

Each case is one small module's forward, ``output.sum()`` and backward in bfloat16. Ground truth:
``torch.profiler``'s memory events in a fresh subprocess (after a warm-up step), the highest
"Total Allocated" above what was live when the step began. The simulation: the engine's
``forward_backward`` phase on fakes (:func:`~estimator.peak.sim.steps.simulate_step`), less what was
live when it began (weights, inputs). Both run with this process's thread count.

Where oneDNN runs bfloat16 with AVX-512 (the weight-gradient scratchpad of its convolutions and the
float32 accumulator of its ``gemm:jit:bf16`` matmul are modelled exactly) the two agree to the
byte (but for the 1x1 convolution with a grad input, a known gap, marked); where the CPU has bfloat16
instructions, oneDNN's matmuls are ``brgemm`` kernels, not modelled (marked, and never simulated high);
on any other CPU these rules give nothing, and the simulation must still be within 2% of what runs there.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

from estimator.modules.estimate import meta_copy
from estimator.peak.inputs.generic import module_workload
from estimator.peak.kernels.cpu import workspace
from estimator.peak.sim.materialize import materialize
from estimator.peak.sim.steps import simulate_step

ROOT = Path(__file__).resolve().parents[1]
BF16 = torch.bfloat16


class Batched(nn.Module):
    """``bmm`` (or ``baddbmm``) of the input with a batched weight: both are matmuls in backward too."""

    def __init__(self, b: int, k: int, n: int, bias_m: int = 0) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(b, k, n))
        self.bias = nn.Parameter(torch.randn(b, bias_m, n)) if bias_m else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.bmm(x, self.w) if self.bias is None else torch.baddbmm(self.bias, x, self.w)


# name: (module factory, input size, bytes the simulation may be off on the oneDNN AVX-512 path)
CASES: dict[str, tuple[Callable[[], nn.Module], tuple[int, ...], int]] = {
    # first layers: no grad input, the weight gradient in jit_bf16 with its scratchpad
    "patch_embed": (lambda: nn.Conv2d(3, 64, 8, stride=8), (4, 3, 64, 64), 0),
    "stem_3x3": (lambda: nn.Conv2d(3, 16, 3, padding=1), (2, 3, 16, 16), 0),
    # a 3x3 layer with a grad input behind a first layer
    "conv_3x3": (lambda: nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.Conv2d(16, 32, 3)), (2, 3, 16, 16), 0),
    # a 1x1 layer with a grad input: jit_bf16_1x1 also holds float32 output / grad-input
    # accumulators and a larger weight-gradient scratchpad (not modelled: 25.6% low)
    "conv_1x1": (lambda: nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.Conv2d(32, 48, 1)), (2, 3, 12, 12), 0),
    # HF ViT's MLP (4 x 65 tokens): the 260 x 128 grad input of the second Linear holds the peak
    "vit_mlp": (lambda: nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 64)), (4, 65, 64), 0),
    "odd_linear": (lambda: nn.Sequential(nn.Linear(33, 100), nn.Linear(100, 17)), (3, 37, 33), 0),
    "bmm": (lambda: Batched(16, 16, 65), (16, 65, 16), 0),
    "baddbmm": (lambda: Batched(7, 9, 11, bias_m=13), (7, 13, 9), 0),
}

# Below AVX-512 (ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2) bfloat16 convolutions and bmm run
# in PyTorch's native kernels, whose buffers are not modelled: measured there (2 threads) the
# convolutions are 27-58% low (the 1x1 one 68% high) and bmm 25% high; the Linear and baddbmm
# cases are exact.
NATIVE_GAPS = frozenset({"patch_embed", "stem_3x3", "conv_3x3", "conv_1x1", "bmm"})
# CPUs with bfloat16 instructions (avx512_bf16, AMX) run these in oneDNN's brgemm kernels instead of
# gemm:jit:bf16, whose buffers are not modelled: measured on an AMD EPYC with avx512_bf16 (2 threads),
# 14-78% low (vit_mlp 249,348 vs 357,508; baddbmm 3,392 vs 15,320).
MATMULS = frozenset({"vit_mlp", "odd_linear", "bmm", "baddbmm"})
# With AMX (Intel Sapphire Rapids and later) oneDNN also runs the 3x3 and patch convolutions in AMX
# brgemm kernels, whose scratchpads are not modelled: measured on an Intel Xeon with amx_bf16
# (2 threads), patch_embed 164,616 simulated vs 2,065,716; stem_3x3 62,216 vs 155,476; conv_3x3
# 197,832 vs 255,476; the depthwise and Linear-free cases stay exact.
AMX_CONVS = frozenset({"patch_embed", "stem_3x3", "conv_3x3"})


def onednn_amx() -> bool:
    """Whether oneDNN may pick its AMX kernels here (the CPU has AMX tiles, no ISA cap below AMX)."""
    isa = (os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA") or "").upper()
    return bool(torch.cpu._is_amx_tile_supported()) and (not isa or "AMX" in isa or isa == "ALL")


def measure(case: str, threads: int) -> int:
    """The allocator's peak of one forward + backward above its start; call in a fresh process."""
    from torch.profiler import ProfilerActivity, profile

    from testkit.truth import trace_events

    torch.set_num_threads(threads)
    factory, size, _ = CASES[case]
    model = factory().to(BF16)
    x = torch.randn(size, dtype=BF16)
    model(x).sum().backward()  # warm-up: lazy state, oneDNN's primitive cache
    model.zero_grad(set_to_none=True)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        loss = model(x).sum()
        loss.backward()
        del loss
    events = sorted((e for e in trace_events(prof) if e.get("name") == "[memory]"), key=lambda e: e["ts"])
    start = events[0]["args"]["Total Allocated"] - events[0]["args"]["Bytes"]
    return max(e["args"]["Total Allocated"] for e in events) - start


@functools.cache
def measured(case: str) -> int:
    threads = torch.get_num_threads()
    code = f"import json; from tests.test_workspace_bf16 import measure; print(json.dumps(measure({case!r}, {threads})))"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    return int(done.stdout.strip().splitlines()[-1])


def simulated(case: str) -> int:
    factory, size, _ = CASES[case]
    model = meta_copy(factory().to(BF16))
    fake_mode = FakeTensorMode(static_shapes=True)
    try:
        materialize(model, fake_mode)
        step = simulate_step(model, module_workload((size,), BF16), fake_mode, mode="training", device="cpu", optimizer="sgd")
    finally:
        FakeTensorMode.cache_clear()
    phase = step.phases["forward_backward"]
    at_start = sum(phase.components.get(k, 0) for k in ("weights", "inputs", "optimizer_states"))
    return phase.peak_bytes - at_start


def onednn_avx512_bf16() -> bool:
    return workspace.block_size() == 16 and bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


_KNOWN_GAP = pytest.mark.xfail(
    onednn_avx512_bf16(),
    strict=True,
    reason="jit_bf16_1x1's float32 accumulators are not modelled: 134,756 simulated, 181,092 measured (2 threads)",
)


@pytest.mark.parametrize("case", [pytest.param(c, marks=_KNOWN_GAP) if c == "conv_1x1" else c for c in CASES])
def test_bf16_step_matches_the_allocator(case: str) -> None:
    truth, sim = measured(case), simulated(case)
    slack = CASES[case][2]
    if onednn_avx512_bf16() and case in MATMULS and not workspace._onednn_bf16_gemm():
        # avx512_bf16 / AMX: oneDNN's brgemm matmul, whose buffers are not modelled (estimator/peak/kernels/cpu/workspace.py);
        # the model then counts no accumulator, so it can only be low
        assert sim <= truth, (case, sim, truth)
        pytest.xfail(f"{case}: oneDNN's brgemm bfloat16 matmul here (avx512_bf16/AMX), its buffers not modelled "
                     f"({sim:,} simulated, {truth:,} measured)")
    if onednn_avx512_bf16() and case in AMX_CONVS and onednn_amx():
        assert sim <= truth, (case, sim, truth)  # the unmodelled AMX scratchpad can only be missing
        pytest.xfail(f"{case}: oneDNN's AMX brgemm bfloat16 convolution here, its scratchpad not modelled "
                     f"({sim:,} simulated, {truth:,} measured)")
    if onednn_avx512_bf16():
        assert abs(sim - truth) <= slack, (case, sim, truth)
    elif case in NATIVE_GAPS:  # checked by test_the_rules_apply_only_to_onednn_avx512_bf16 there
        pytest.xfail(f"{case}: PyTorch's native bfloat16 kernel here, not modelled ({sim:,} simulated, {truth:,} measured)")
    else:  # PyTorch's own bfloat16 matmul: no hidden buffer
        assert abs(sim - truth) <= 0.02 * truth, (case, sim, truth)


def test_the_rules_apply_only_to_onednn_avx512_bf16() -> None:
    """The bfloat16 terms are zero for float32 and below AVX-512, and present where they run."""
    a, b = torch.empty(260, 64, dtype=BF16), torch.empty(64, 128, dtype=BF16)
    out = torch.empty(260, 128, dtype=BF16)
    mm_bf16 = workspace._bf16_matmul_accumulator(a, b, out)
    mm_f32 = workspace._bf16_matmul_accumulator(a.float(), b.float(), out.float())
    x, w, g = torch.empty(4, 3, 64, 64, dtype=BF16), torch.empty(64, 3, 8, 8, dtype=BF16), torch.empty(4, 64, 8, 8, dtype=BF16)
    conv = functools.partial(
        workspace._bf16_weight_grad_scratchpad, stride=(8, 8), padding=(0, 0), dilation=(1, 1), groups=1, mask=(False, True, True)
    )
    assert mm_f32 == 0 and conv(g.float(), x.float(), w.float()) == 0
    assert workspace._bf16_matmul_accumulator(a[:16, :16], b[:16, :16], out[:16, :16]) == 0  # 16^3: PyTorch's own kernel
    if not onednn_avx512_bf16():
        assert mm_bf16 == 0 and conv(g, x, w) == 0
    else:
        assert conv(g, x, w) > 0
        if workspace._onednn_bf16_gemm():  # gemm:jit:bf16 (no avx512_bf16/AMX): a float32 result + 128 B
            threads = torch.get_num_threads()
            per_thread = -(-260 * 128 // threads) // 128 * 128
            assert mm_bf16 == max(260 * 128, threads * -(-per_thread // 64) * 64) * 4 + 128
