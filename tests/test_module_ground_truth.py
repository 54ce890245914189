"""``estimate_module`` against the CPU allocator, and where pytorch_modelsize's logic goes wrong.

Ground truth: ``torch.profiler`` with ``profile_memory=True``, the maximum "Total Allocated" of
its memory events (the CPU allocator's live total), the model built inside the profiled region,
each case in a fresh process (the profiler's total also counts what earlier profiled code left
alive; testkit.peak_pool forks one per case from a server that has imported torch). The real work is what
``estimate_module`` simulates: two steps of forward, ``output.sum()``, backward, ``torch.optim.AdamW`` with its CPU
defaults, ``zero_grad``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from estimator.modules.estimate import estimate_module
from testkit.peak_pool import run_truth_jobs
from testkit.peak_truth import train_or_infer
from testkit.truth import allocated_peak, trace_events

MiB = 2**20


class ReadmeModel(nn.Module):
    """pytorch_modelsize's README example, verbatim in structure."""

    def __init__(self) -> None:
        super().__init__()
        self.conv0 = nn.Conv2d(1, 16, kernel_size=3, padding=5)
        self.conv1 = nn.Conv2d(16, 32, kernel_size=3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv0(x)
        h = self.conv1(h)
        return h


class PoolModel(ReadmeModel):
    """The same with ``F.max_pool2d`` in ``forward()``: the case the README says breaks the tool."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv0(x)
        h = F.max_pool2d(h, 2)
        h = self.conv1(h)
        return h


class Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(512)
        self.up = nn.Linear(512, 2048)
        self.down = nn.Linear(2048, 512)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(F.gelu(self.up(self.norm(x))))


CASES = {
    "readme": (ReadmeModel, (16, 1, 256, 256)),
    "readme_pool": (PoolModel, (16, 1, 256, 256)),
    "readme_pool_128": (PoolModel, (16, 1, 128, 128)),  # issue 23's case for the loop that keeps the output
    "mlp": (Mlp, (64, 128, 512)),
}


def measure(case: str, mode: str) -> int:
    """The CPU allocator's peak for one case; call only in a fresh process (see the docstring)."""
    from torch.profiler import ProfilerActivity, profile

    cls, size = CASES[case]
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        model = cls()
        x = torch.randn(size)
        if mode == "training_kept":  # the seed tools' loop: the output lives through backward() and the step
            opt = torch.optim.AdamW(model.parameters())
            for _ in range(2):
                out = model(x)
                out.sum().backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
        else:  # training: AdamW at its default lr (1e-3), the loss dropped after each backward; or one no_grad forward
            train_or_infer(model, x, mode, lambda m, i: m(i).sum(), lambda m, i: m(i), lr=1e-3)
    return allocated_peak(trace_events(prof))


ALLOCATOR_CASES = [("readme", "training"), ("readme_pool", "training"), ("mlp", "training"), ("mlp", "inference")]
KEPT_CASES = [("readme_pool_128", "training_kept"), ("readme_pool_128", "training")]
_MEASURED: dict[tuple[str, str], int] = {}  # measured once per process, for this module and the ones importing measured_peak


def measure_all(pairs: list[tuple[str, str]]) -> None:
    """:func:`measure` each ``(case, mode)`` not measured yet, each in its own fresh process forked from a server that
    has imported torch and this module (testkit.peak_pool.run_truth_jobs), two at a time."""
    missing = sorted({pair for pair in pairs if pair not in _MEASURED})
    if missing:
        found = run_truth_jobs("tests.test_module_ground_truth", [("truth", case, mode) for case, mode in missing], processes=2)
        for (_, case, mode), value in found.items():
            assert isinstance(value, int), f"ground truth of {case} {mode} failed: {value}"
            _MEASURED[(case, mode)] = value


def measured_peak(case: str, mode: str) -> int:
    """The CPU allocator's peak of one case (:func:`measure` in a fresh process, once per process)."""
    measure_all([(case, mode)])
    return _MEASURED[(case, mode)]


@pytest.fixture(scope="module", autouse=True)
def _measured() -> None:
    """Every case this module checks measured up front, two at a time."""
    measure_all(ALLOCATOR_CASES + KEPT_CASES)


@pytest.mark.parametrize(("case", "mode"), ALLOCATOR_CASES)
def test_peak_within_2_percent_of_the_cpu_allocator(case: str, mode: str) -> None:
    cls, size = CASES[case]
    row = estimate_module(cls(), size, mode=mode, device="cpu").row("float32")
    truth = measured_peak(case, mode)
    assert row.peak_bytes is not None
    assert sum(row.components.values()) == row.peak_bytes
    assert abs(row.peak_bytes - truth) / truth < 0.02, (row.peak_bytes / MiB, truth / MiB)


def test_the_loop_that_keeps_the_output_is_reported_within_2_percent() -> None:
    """``out = model(x); out.sum().backward(); opt.step()`` keeps ``out`` alive through backward()
    and the step: with ``F.max_pool2d`` at (16, 1, 128, 128) it peaks 8.9 MB (+14%) above the loop that
    keeps only the loss. ``outputs_kept_bytes`` is that loop's peak, and a note says so."""
    row = estimate_module(PoolModel(), (16, 1, 128, 128), device="cpu").row("float32")
    kept_truth, loss_only_truth = measured_peak("readme_pool_128", "training_kept"), measured_peak("readme_pool_128", "training")
    assert row.peak_bytes is not None and row.outputs_kept_bytes is not None
    assert abs(row.peak_bytes - loss_only_truth) / loss_only_truth < 0.02
    assert abs(row.outputs_kept_bytes - kept_truth) / kept_truth < 0.02, (row.outputs_kept_bytes, kept_truth)
    assert kept_truth - loss_only_truth > 8 * MiB  # the case matters: the two loops differ by more than the tolerance
    assert any(f"peaks at {row.outputs_kept_bytes:,} bytes" in note for note in row.notes)
    assert row.to_dict()["outputs_kept_bytes"] == row.outputs_kept_bytes
    inference = estimate_module(PoolModel(), (16, 1, 128, 128), mode="inference", device="cpu").row("float32")
    assert inference.outputs_kept_bytes is None  # inference keeps its output anyway


# -- pytorch_modelsize's SizeEstimator, as its README and blog post describe it -------------------


def old_size_estimator(model: nn.Module, input_size: tuple[int, ...], bits: int = 32) -> dict[str, object]:
    """The seed tool's algorithm, step by step as its blog post gives it (not its code).

    Parameters: the sizes of the last module's parameters (the post's loop resets its list for
    every module, which is why its README prints 3424928768 bits). Intermediates: the input is
    fed through ``model.modules()[1:]`` as if they were a chain, and every output counts twice
    ("values and gradients").
    """
    mods = list(model.modules())
    sizes: list[np.ndarray] = []
    for m in mods[1:]:
        sizes = [np.array(p.size()) for p in m.parameters()]
    param_bits = sum(int(np.prod(s)) * bits for s in sizes)
    out_sizes = []
    x = torch.zeros(input_size)
    with torch.no_grad():
        for m in mods[1:]:
            x = m(x)
            out_sizes.append(tuple(x.size()))
    forward_backward_bits = 2 * sum(int(np.prod(s)) * bits for s in out_sizes)
    input_bits = int(np.prod(input_size)) * bits
    total = param_bits + forward_backward_bits + input_bits
    return {"megabytes": total / 8 / 1024**2, "bits": total, "out_sizes": out_sizes}


def real_output_sizes(model: nn.Module, input_size: tuple[int, ...]) -> list[tuple[int, ...]]:
    sizes: list[tuple[int, ...]] = []
    hooks = [m.register_forward_hook(lambda _m, _i, o: sizes.append(tuple(o.shape))) for m in list(model.modules())[1:]]
    with torch.no_grad():
        model(torch.zeros(input_size))
    for h in hooks:
        h.remove()
    return sizes


def test_old_size_estimator_reproduces_its_readme_and_goes_wrong() -> None:
    size = (16, 1, 256, 256)
    old = old_size_estimator(ReadmeModel(), size)
    assert old["bits"] == 3424928768  # the README's figure
    assert old["megabytes"] == pytest.approx(408.2833251953125)

    # With F.max_pool2d in forward() the chain of modules never sees the pool: conv1 is fed a
    # 264x264 map instead of a 132x132 one, so the old estimate does not change at all ...
    pool_old = old_size_estimator(PoolModel(), size)
    assert pool_old["bits"] == old["bits"]
    assert pool_old["out_sizes"][1] == (16, 32, 262, 262)
    assert real_output_sizes(PoolModel(), size)[1] == (16, 32, 130, 130)

    # ... and it is wrong in both directions against the allocator: it misses the kernels' dense
    # and blocked copies of the plain model, and charges the pooled one for maps that never exist.
    plain_truth, pool_truth = measured_peak("readme", "training"), measured_peak("readme_pool", "training")
    old_bytes = old["bits"] // 8
    assert old_bytes < 0.9 * plain_truth
    assert old_bytes > 1.5 * pool_truth
    ours = estimate_module(PoolModel(), size, device="cpu").row("float32").peak_bytes
    assert ours is not None and abs(ours - pool_truth) / pool_truth < 0.02
