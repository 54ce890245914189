"""Known input values (``estimator.peak.fakes.known_values``) against real torch: values that ops update
in place follow the real update (Adam's step counter), as the real run computes them."""

from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from estimator.peak.fakes.known_values import KnownValues


def _real_adam_steps() -> list[float]:
    p = torch.nn.Parameter(torch.ones(4))
    opt = torch.optim.Adam([p], lr=0.1)
    seen = []
    for _ in range(2):
        p.grad = torch.ones(4)
        opt.step()
        seen.append(float(opt.state[p]["step"]))
    return seen


def test_in_place_update_of_a_known_value_follows_the_real_one() -> None:
    real = torch.tensor(0.0)
    real += 1
    real.add_(2)
    with FakeTensorMode(), KnownValues():
        step = torch.tensor(0.0)
        step += 1
        step.add_(2)
        assert step.item() == real.item() == 3.0


def test_adam_steps_under_fake_tensors_count_as_the_real_ones() -> None:
    with FakeTensorMode(), KnownValues():
        p = torch.nn.Parameter(torch.ones(4))
        opt = torch.optim.Adam([p], lr=0.1)
        seen = []
        for _ in range(2):
            p.grad = torch.ones(4)
            opt.step()  # before the fix: the known step stayed 0 and Adam divided by 1 - beta ** 0
            seen.append(float(opt.state[p]["step"].item()))
    assert seen == _real_adam_steps() == [1.0, 2.0]
