"""``depthwise_backward_scratch`` against the allocator: a channels-last depthwise
``aten.convolution_backward`` is run for real in a fresh process under ``torch.profiler``'s memory
events; the bytes it holds above its outputs at its high point must equal (within 2%) the rule's bytes
plus the channel-padded weight that ``workspace._conv_backward`` already gives every channels-last
backward. The rule is evaluated in the same process (same ISA, same thread count); the shapes share that one process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from estimator.peak.kernels.cpu.depthwise import depthwise_backward_scratch
from estimator.peak.kernels.cpu.workspace import block_size

ROOT = Path(__file__).resolve().parents[1]

_MEASURE = r"""
import json, sys, torch
from torch.profiler import ProfilerActivity, profile
from estimator.peak.kernels.cpu.depthwise import depthwise_backward_scratch
from estimator.peak.kernels.cpu.workspace import block_size
from testkit.truth import trace_events

def measure(dtype, c, hw, batch, k, threads):
    dt = getattr(torch, dtype)
    torch.set_num_threads(threads)
    x = torch.randn(batch, c, hw, hw, dtype=dt).to(memory_format=torch.channels_last)
    w = torch.randn(c, 1, k, k, dtype=dt).to(memory_format=torch.channels_last)
    y = torch.ops.aten.convolution.default(x, w, None, [1, 1], [k // 2, k // 2], [1, 1], False, [0, 0], c)
    args = (torch.randn_like(y), x, w, [c], [1, 1], [k // 2, k // 2], [1, 1], False, [0, 0], c, [True, True, True])
    torch.ops.aten.convolution_backward.default(*args)  # warm-up: oneDNN's primitive cache
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        outs = torch.ops.aten.convolution_backward.default(*args)
    events = sorted((e for e in trace_events(prof) if e.get("name") == "[memory]"), key=lambda e: e["ts"])
    start = events[0]["args"]["Total Allocated"] - events[0]["args"]["Bytes"]
    peak = max(e["args"]["Total Allocated"] for e in events) - start
    outputs = sum(o.numel() * o.element_size() for o in outs if o is not None)
    padded_weight = -(-c // block_size()) * block_size() * k * k * x.element_size()
    return {"measured": peak - outputs, "model": depthwise_backward_scratch(args, outs) + padded_weight}


print(json.dumps([measure(*shape) for shape in json.loads(sys.argv[1])]))
"""

# (dtype, channels, spatial, batch, kernel): ConvNeXt-atto's depthwise 7x7 layers at 64 px, a 5x5
# one (MobileNet-like) and a 4x4 one (even kernel: the output is one larger than the input).
SHAPES = [
    ("float32", 40, 16, 4, 7),
    ("float32", 320, 2, 4, 7),
    ("float32", 80, 8, 2, 5),
    ("float32", 40, 16, 1, 4),
    ("bfloat16", 40, 16, 4, 7),
    ("bfloat16", 160, 4, 2, 7),
]


def _onednn_bf16() -> bool:
    return block_size() == 16 and bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


@pytest.fixture(scope="module")
def measurements() -> dict[tuple[str, int, int, int, int], dict[str, int]]:
    """Every measured shape in one fresh process (imports paid once): each shape has its own warm-up and its own
    profile, and its bytes are counted from that profile's first event, so one shape's run does not touch another's."""
    threads = min(2, torch.get_num_threads())
    shapes = [shape for shape in SHAPES if shape[0] == "float32" or _onednn_bf16()]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", _MEASURE, json.dumps([[*shape, threads] for shape in shapes])],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return dict(zip(shapes, json.loads(proc.stdout.strip().splitlines()[-1]), strict=True))


@pytest.mark.parametrize(("dtype", "channels", "spatial", "batch", "kernel"), SHAPES)
def test_rule_matches_the_allocator(measurements: dict[tuple[str, int, int, int, int], dict[str, int]], dtype: str,
                                    channels: int, spatial: int, batch: int, kernel: int) -> None:
    assert torch.backends.mkldnn.is_available()  # every x86-64 build of torch has oneDNN
    if dtype == "bfloat16" and not _onednn_bf16():
        # bfloat16 convolutions run in PyTorch's own kernels here: the rule must not claim a oneDNN buffer.
        from estimator.peak.kernels.cpu.depthwise import depthwise_backward_scratch

        x = torch.empty(batch, channels, spatial, spatial, dtype=torch.bfloat16).to(memory_format=torch.channels_last)
        w = torch.empty(channels, 1, kernel, kernel, dtype=torch.bfloat16)
        g = torch.empty(batch, channels, spatial, spatial, dtype=torch.bfloat16).to(memory_format=torch.channels_last)
        args = (g, x, w, [channels], [1, 1], [kernel // 2] * 2, [1, 1], False, [0, 0], channels, [True, True, True])
        assert depthwise_backward_scratch(args, (x, w, None)) == 0
        return
    result = measurements[(dtype, channels, spatial, batch, kernel)]
    measured, model = result["measured"], result["model"]
    assert measured > 100_000  # the rule's buffer is there at all
    assert abs(model - measured) <= 0.02 * measured, (model, measured)


def _args(x: torch.Tensor, w: torch.Tensor, groups: int, k: int) -> tuple:
    g = torch.empty(x.shape[0], w.shape[0], x.shape[2], x.shape[3], dtype=x.dtype)
    return (g, x, w, [w.shape[0]], [1, 1], [k // 2, k // 2], [1, 1], False, [0, 0], groups, [True, True, True])


def test_rule_does_not_apply_elsewhere() -> None:
    cl = torch.channels_last
    x = torch.empty(2, 32, 8, 8).to(memory_format=cl)
    dw7 = torch.empty(32, 1, 7, 7).to(memory_format=cl)
    assert depthwise_backward_scratch(_args(x, dw7, 32, 7), None) > 0
    # NCHW input and weight (oneDNN's gemm path, modelled in workspace._conv_backward)
    assert depthwise_backward_scratch(_args(torch.empty(2, 32, 8, 8), torch.empty(32, 1, 7, 7), 32, 7), None) == 0
    # 3x3 depthwise that fits the input: oneDNN's own depthwise weight-gradient kernel (a few KiB)
    dw3 = torch.empty(32, 1, 3, 3).to(memory_format=cl)
    assert depthwise_backward_scratch(_args(x, dw3, 32, 3), None) == 0
    # ungrouped, and grouped but not depthwise
    dense = torch.empty(32, 32, 7, 7).to(memory_format=cl)
    assert depthwise_backward_scratch(_args(x, dense, 1, 7), None) == 0
    grouped = torch.empty(32, 2, 7, 7).to(memory_format=cl)
    assert depthwise_backward_scratch(_args(x, grouped, 16, 7), None) == 0
    # no weight gradient requested
    args = list(_args(x, dw7, 32, 7))
    args[10] = [True, False, True]
    assert depthwise_backward_scratch(tuple(args), None) == 0
    # fake tensors (what the simulator passes)
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        fx, fw = mode.from_tensor(x), mode.from_tensor(dw7)
        assert depthwise_backward_scratch(_args(fx, fw, 32, 7), None) == depthwise_backward_scratch(_args(x, dw7, 32, 7), None)
