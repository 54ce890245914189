"""``device="cuda"`` mixed precision: CUDA's autocast policy and fused dropout, checked against
PyTorch's own CUDA kernels on fake CUDA tensors (no GPU needed for a forward pass).

1. Every op of PyTorch's own CUDA autocast test lists (``torch.testing._internal.
   autocast_test_lists.AutocastTestLists``) that fake CUDA tensors can run gives the same output
   dtypes under real CUDA autocast as under ``cuda_autocast_policy`` on CPU fakes.
2. A training forward + loss of whole models under CUDA autocast in bfloat16 on fake CUDA tensors
   holds, at its peak and at its end, exactly the bytes the estimator's CUDA emulation holds.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._pytree import tree_map

from estimator.peak.kernels.cuda.autocast import cuda_autocast_policy
from testkit.cuda_fakes import forward_peak, real_cuda_autocast

# Ops of the lists that fake CUDA tensors cannot run without a driver (cuDNN calls, CUDA-only
# kernels) or that torch's CUDA autocast itself rejects on fakes (promote of mixed fakes).
NOT_RUNNABLE = {"cudnn_convolution", "cudnn_convolution_transpose", "gru_cell", "einsum", "bilinear", "dot",
                "vdot", "grid_sampler", "index_put", "scatter_add"}


def _entries() -> list[tuple[str, str, Any]]:
    from torch.testing._internal.autocast_test_lists import AutocastTestLists  # imports expecttest (requirements-dev.txt)

    lists = AutocastTestLists(torch.device("meta"))
    found = []
    for name in ("torch_fp16", "torch_fp32", "torch_need_autocast_promote"):
        found += [("torch", e[0], e[1]) for e in getattr(lists, name)]
    for name in ("nn_fp16", "nn_fp32"):
        found += [("nn", e[0], e[1]) for e in getattr(lists, name)]
    return found


def _dtypes(out: Any) -> list[torch.dtype]:
    return [t.dtype for t in (out if isinstance(out, (tuple, list)) else [out]) if isinstance(t, torch.Tensor)]


def test_every_op_of_torch_s_cuda_autocast_lists_gets_cuda_s_dtypes() -> None:
    fake_mode = FakeTensorMode()

    def on(device: str, args: Any) -> Any:
        with fake_mode:
            return tree_map(lambda t: torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=device)
                            if isinstance(t, torch.Tensor) else t, args)

    checked, differ = [], []
    for namespace, op, args in _entries():
        fn = getattr(torch, op, None) if namespace == "torch" else getattr(torch._C._nn, op, None)
        if fn is None or op in NOT_RUNNABLE:
            continue
        with real_cuda_autocast(torch.bfloat16), fake_mode:
            want = _dtypes(fn(*on("cuda", args)))
        with cuda_autocast_policy(torch.bfloat16), fake_mode:
            got = _dtypes(fn(*on("cpu", args)))
        checked.append(op)
        if got != want:
            differ.append((op, want, got))
    assert len(checked) >= 80 and not differ, differ


def test_the_policy_is_gone_after_the_simulation() -> None:
    x = torch.randn(4, 8, dtype=torch.bfloat16)
    with cuda_autocast_policy(torch.bfloat16):
        assert torch.pow(x, 2).dtype == torch.float32  # CUDA's float32 list
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.pow(x, 2).dtype == torch.bfloat16  # CPU's own policy again
        assert torch.nn.functional.cross_entropy(x, torch.zeros(4, dtype=torch.long)).dtype == torch.float32


@pytest.mark.parametrize("case", ["gpt2", "bert_mlm", "llama_gqa", "t5", "bart", "vit"])
def test_a_mixed_precision_forward_holds_what_cuda_holds(case: str) -> None:
    real = forward_peak(case, torch.bfloat16, real_cuda=True)
    ours = forward_peak(case, torch.bfloat16, real_cuda=False)
    assert ours == real
