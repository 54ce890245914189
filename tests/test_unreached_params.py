"""Optimizer state only for the parameters the backward reaches (``estimator.peak.sim.steps.simulate_step``).

A loss that leaves a trainable head unused (the Qwen2.5-VL vision tower's merger under a loss on
``last_hidden_state``) gives that head no gradient, and ``torch.optim.AdamW`` skips a ``grad`` of None:
the real run keeps no state for it. The simulation's first step (zero gradients + ``optimizer.step()``)
must give gradients only where the backward does. The truth is the real step on CPU: the bytes of
AdamW's states after two real steps.
"""

from __future__ import annotations

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

from estimator.options import Component
from estimator.peak.inputs.generic import module_workload
from estimator.peak.sim.materialize import materialize
from estimator.peak.sim.steps import simulate_step


class UnusedHead(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(32, 32)
        self.head = nn.Linear(32, 64)  # computed, returned second, outside the loss

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = self.body(x)
        return hidden, self.head(hidden)


def _real_state_bytes() -> int:
    torch.manual_seed(0)
    model, workload = UnusedHead(), module_workload(((4, 32),), torch.float32)
    inputs = {k: torch.randn(v.shape) for k, v in workload.make_inputs().items()}
    opt = torch.optim.AdamW(model.parameters())
    for _ in range(2):
        workload.train_loss(model, inputs).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    assert model.head.weight not in opt.state  # the real run: no state for the unused head
    return sum(v.untyped_storage().nbytes() for s in opt.state.values() for v in s.values() if isinstance(v, torch.Tensor))


def test_no_optimizer_state_for_parameters_the_loss_leaves_without_gradient() -> None:
    fake_mode = FakeTensorMode(static_shapes=True)
    with torch.device("meta"):
        model = UnusedHead()
    materialize(model, fake_mode)
    workload = module_workload(((4, 32),), torch.float32)
    step = simulate_step(model, workload, fake_mode, mode="training", device="cpu")
    full = simulate_step(model, workload, fake_mode, mode="training", device="cpu", full_first_step=True)
    states = Component.OPTIMIZER_STATES.value
    assert step.phases["optimizer_step"].components[states] == _real_state_bytes()
    assert {k: v.peak_bytes for k, v in step.phases.items()} == {k: v.peak_bytes for k, v in full.phases.items()}


def test_experts_no_token_reaches_under_the_routing_assumption_keep_their_states() -> None:
    """Under the routing assumption (``Workload.states_for_all``) the experts no token reaches when the router's
    scores tie still get optimizer states, as every expert of a real run does once it has had a token: the states
    are AdamW's two moments of every trainable parameter (``testkit.router_truth`` measures the run so; the
    Switch Transformers rows of bench/results/router_accuracy.md)."""
    from dataclasses import replace

    fake_mode = FakeTensorMode(static_shapes=True)
    with torch.device("meta"):
        model = UnusedHead()
    materialize(model, fake_mode)
    workload = replace(module_workload(((4, 32),), torch.float32), states_for_all=True)
    step = simulate_step(model, workload, fake_mode, mode="training", device="cpu")
    every = sum(2 * p.numel() * p.element_size() for p in model.parameters())
    states = step.phases["optimizer_step"].components[Component.OPTIMIZER_STATES.value]
    assert every <= states < every + 4 * 64  # plus AdamW's step counters, one per parameter
