"""Independent truth for CUDA's choices without a GPU: fake CUDA tensors dispatch as CUDA tensors do.

Fake tensors on ``device="cuda"`` run CUDA's dispatch decisions — the ``AutocastCUDA`` kernels
(enabled with ``torch.set_autocast_enabled("cuda", True)``, since ``torch.autocast("cuda")``
disables itself without a driver) and ATen's device checks such as the fused dropout — through a
forward pass (the autograd engine needs a real CUDA device for backward). The estimator simulates
``device="cuda"`` on CPU fakes with CUDA's policies applied (``estimator.peak.kernels.cuda.autocast``,
``cuda_dropout``); :func:`forward_peak` runs one training forward both ways so that tests can
compare them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensorMode


@contextlib.contextmanager
def real_cuda_autocast(dtype: torch.dtype) -> Iterator[None]:
    """CUDA's own autocast (its C++ kernels), on a machine without a GPU."""
    previous = torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda")
    torch.set_autocast_enabled("cuda", True)
    torch.set_autocast_dtype("cuda", dtype)
    torch.autocast_increment_nesting()
    try:
        yield
    finally:
        if torch.autocast_decrement_nesting() == 0:
            torch.clear_autocast_cache()
        torch.set_autocast_enabled("cuda", previous[0])
        torch.set_autocast_dtype("cuda", previous[1])


def forward_peak(case_name: str, dtype: torch.dtype, *, real_cuda: bool, seq_len: int = 128) -> dict[str, Any]:
    """Peak and live bytes after a training-mode forward + loss of the case under autocast in
    ``dtype``: on fake CUDA tensors under CUDA's own autocast (``real_cuda``), or as the estimator
    simulates ``device="cuda"`` (CPU fakes, CUDA's policies)."""
    from estimator.peak.inputs.providers import workload_for
    from estimator.peak.kernels.cuda.autocast import cuda_autocast_policy
    from estimator.peak.kernels.cuda.dropout import cuda_dropout
    from estimator.peak.kernels.cuda.sdpa import cuda_sdpa
    from estimator.peak.sim.materialize import materialize
    from estimator.peak.sim.tracker import StorageTracker
    from testkit.peak_cases import CASES

    case = CASES[case_name]
    model = case.build_on("meta")
    workload = workload_for(model, batch_size=case.batch_size, seq_len=seq_len, image_size=case.image_size)
    fake_mode = FakeTensorMode(static_shapes=True)
    device = "cuda" if real_cuda else "cpu"
    materialize(model, fake_mode, device)
    model.train()
    tracker = StorageTracker()
    policy = real_cuda_autocast(dtype) if real_cuda else cuda_autocast_policy(dtype)
    dropout = contextlib.nullcontext() if real_cuda else cuda_dropout()
    with fake_mode, tracker, torch.device(device), cuda_sdpa(), dropout:
        inputs = workload.make_inputs()
        with policy:
            loss = workload.train_loss(model, inputs)
        return {"peak_bytes": tracker.peak_bytes, "live_bytes": tracker.live_bytes, "loss_dtype": str(loss.dtype)}
