"""QLoRA on ``--device cuda``: a 4-bit layer's temporaries as bitsandbytes 0.50's CUDA path allocates them.

No GPU here: the figures are pinned to bitsandbytes' own source (installed), not to a measured CUDA run.
``Linear4bit.forward`` -> ``matmul_4bit`` -> ``MatMul4Bit.forward`` -> ``torch.ops.bitsandbytes.gemm_4bit``, whose
CUDA kernel (``backends/cuda/ops.py``) runs the fused ``cgemm_4bit`` (output only) for up to
``_GEMM_4BIT_CUSTOM_FLOOR_M`` rows and, above ``_gemm_4bit_custom_max_m`` rows, ``_dequant_linear_fallback``: the
whole weight dequantized to the compute dtype (``B_dq``, freed on return) then ``F.linear``. ``MatMul4Bit.backward``
makes ``dequantize_4bit(B)`` (the weight in the dtype it was quantized from) for ``grad_A = grad_output @ W``.
"""

from __future__ import annotations

import importlib.util
import re

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from estimator.options import Component
from estimator.peak.sim import qlora, quantized
from estimator.peak.sim.tracker import StorageTracker

N, K = 512, 256  # out_features, in_features


def _source_constant(name: str) -> int:
    spec = importlib.util.find_spec("bitsandbytes.backends.cuda.ops")
    assert spec is not None and spec.loader is not None
    text = spec.loader.get_source("bitsandbytes.backends.cuda.ops")  # type: ignore[attr-defined]
    found = re.search(rf"^\s*{name}\s*=\s*(\d+)\s*$", text or "", re.MULTILINE)
    assert found, f"{name} not in bitsandbytes' CUDA ops"
    return int(found.group(1))


def test_thresholds_are_bitsandbytes_own() -> None:
    assert _source_constant("_GEMM_4BIT_CUSTOM_FLOOR_M") == qlora.CUDA_FUSED_MAX_M
    assert _source_constant("_gemm_4bit_custom_max_m") == qlora.CUDA_DEQUANT_ABOVE_M


def _layer_peaks(rows: int, device: str) -> tuple[int, int]:
    """The bytes a QLoRA layer (``pack_for`` as the engine calls it) allocates in its forward and in its backward, above
    its input and weights: (forward peak, backward peak)."""
    import bitsandbytes as bnb

    fake_mode = FakeTensorMode(static_shapes=True)
    with torch.device("meta"):
        layer = bnb.nn.Linear4bit(K, N, bias=False, compute_dtype=torch.bfloat16, quant_type="nf4")
    layer._load_dtype = torch.bfloat16  # type: ignore[assignment]  # quantized from bfloat16 (QuantState.dtype)
    notes = quantized.pack_for(layer, fake_mode, 4, "training", device)
    assert (qlora.QLORA_CUDA in notes) == (device == "cuda")
    layer.train()
    with fake_mode:
        x = torch.empty(rows, K, dtype=torch.bfloat16, requires_grad=True)
        grad = torch.empty(rows, N, dtype=torch.bfloat16)
    tracker = StorageTracker()
    with fake_mode, tracker:
        for held in [*layer.parameters(), *layer.buffers(), x, grad]:  # what exists before (the engine registers it so)
            tracker.register(held, Component.WEIGHTS)
        tracker.reset_peak()
        base = tracker.live_bytes
        out = layer(x)
        forward = tracker.peak_bytes - base
        tracker.reset_peak()
        base = tracker.live_bytes
        out.backward(grad)
        backward = tracker.peak_bytes - base
    return forward, backward


@pytest.mark.parametrize("rows", [2048, 1537])
def test_above_the_custom_limit_the_forward_dequantizes_the_weight(rows: int) -> None:
    forward, backward = _layer_peaks(rows, "cuda")
    assert forward == N * K * 2 + rows * N * 2  # B_dq (bfloat16) while F.linear writes the output
    assert backward == N * K * 2 + rows * K * 2  # dequantize_4bit's weight, then grad_A


def test_up_to_four_rows_the_fused_kernel_writes_the_output_only() -> None:
    forward, backward = _layer_peaks(4, "cuda")
    assert forward == 4 * N * 2
    assert backward == N * K * 2 + 4 * K * 2


def test_between_the_limits_the_dequantizing_path_is_assumed() -> None:
    """bitsandbytes picks by GPU (``_gemm_4bit_use_custom_cuda``: SM count, architecture, shape) between 5 and 1,536 rows;
    the simulation knows no GPU and assumes the larger path, and its note says so."""
    forward, _ = _layer_peaks(512, "cuda")
    assert forward == N * K * 2 + 512 * N * 2
    assert "the dequantizing path, the larger, is assumed" in qlora.QLORA_CUDA


def test_cpu_dequantizes_at_any_row_count() -> None:
    """bitsandbytes' CPU gemm_4bit (the default torch kernel) dequantizes then F.linear whatever the rows."""
    forward, _ = _layer_peaks(4, "cpu")
    assert forward == N * K * 2 + 4 * N * 2
