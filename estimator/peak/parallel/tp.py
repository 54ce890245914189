"""Tensor-parallel inference simulated on fake tensors with transformers' own TP plan.

The model's TP plan is resolved by transformers itself (``model._resolve_parallel_plans(
DistributedConfig(tp_size=N))``: the config's ``base_model_tp_plan`` and the class's ``_tp_plan``,
e.g. Llama's q/k/v/gate/up ``colwise``, o/down ``rowwise``, the embedding ``embedding_rowwise``, the
head ``colwise_gather_output``) and applied by
``transformers.distributed.tensor_parallel.apply_tensor_parallelism`` on the fake model under a
fake process group of ``N`` ranks (:func:`~estimator.peak.parallel.fsdp.fake_process_group`), exactly
as ``from_pretrained(tp_plan="auto")`` applies it. The prefill (and decode step) then runs on
rank 0 in the engine (:func:`~estimator.peak.sim.steps.simulate_step`), so what each rank holds is
what the library's sharded layers hold: its slice of every sharded weight, every replicated
weight whole (norms, biases of row-wise layers, rotary tables), its KV heads
(``num_key_value_heads / N``), the activations of its heads and MLP slice, and the replicated
hidden states and gathered logits. Collectives complete at once (fake process group): their
output buffers are counted, nothing waits.

Rank 0 holds the largest slice where a dimension does not divide by ``N`` (``torch.chunk``).
"""

from __future__ import annotations

from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

from estimator.peak.engine import collect_garbage
from estimator.peak.inputs.providers import workload_for
from estimator.peak.parallel.fsdp import Phases, fake_process_group
from estimator.peak.sim.materialize import materialize
from estimator.peak.sim.steps import simulate_step

__all__ = ["TPPlanError", "simulate_tp_phases", "tp_plan"]


class TPPlanError(ValueError):
    """The model has no tensor-parallel plan, or its heads do not divide by the TP size."""


def tp_plan(model: nn.Module, tp_size: int) -> dict[str, str]:
    """The concrete TP plan transformers applies for ``tp_size`` ranks (module or parameter -> style)."""
    from transformers.distributed.configuration_utils import DistributedConfig

    resolve = getattr(model, "_resolve_parallel_plans", None)
    if resolve is None:
        raise TPPlanError(f"{type(model).__name__} is not a transformers model with a tensor-parallel plan")
    try:
        plan, _, _ = resolve(DistributedConfig(tp_size=tp_size))
    except ValueError as exc:  # transformers' own refusal: no tp_plan
        raise TPPlanError(str(exc)) from None
    config = getattr(model, "config", None)
    for key in ("num_attention_heads", "num_key_value_heads"):
        heads = getattr(config, key, None)
        if isinstance(heads, int) and heads % tp_size:  # transformers' get_kv_heads_per_rank refuses them too
            raise TPPlanError(f"{key} = {heads} does not divide by {tp_size} GPUs")
    return dict(plan)


def simulate_tp_phases(
    model: nn.Module, *, tp_size: int, device: str, batch_size: int, seq_len: int, image_size: int | None,
    max_new_tokens: int,
) -> tuple[Phases, tuple[str, ...]]:
    """Rank 0's inference peak per phase (prefill, decode) under transformers' TP plan, and notes."""
    plan = tp_plan(model, tp_size)
    fake_mode = FakeTensorMode(static_shapes=True)
    try:
        workload = workload_for(model, batch_size=batch_size, seq_len=seq_len, image_size=image_size)
        materialize(model, fake_mode)
        with fake_process_group(tp_size) as mesh:
            from transformers.distributed.tensor_parallel import apply_tensor_parallelism

            with fake_mode:
                apply_tensor_parallelism(model, mesh, plan)
            step = simulate_step(model, workload, fake_mode, mode="inference", device=device,  # type: ignore[arg-type]
                                 max_new_tokens=max_new_tokens)
        styles = sorted(set(plan.values()))
        note = (f"tensor parallel over {tp_size} GPUs with transformers' TP plan ({', '.join(styles)}; "
                f"{sum(1 for k in plan if '.' in k and not k.endswith(('.weight', '.bias')))} modules), rank 0 simulated: "
                "its weight slices, the replicated weights whole, its KV heads and activations; collectives complete at once")
        return step.phases, (*step.notes, note)
    finally:
        FakeTensorMode.cache_clear()
        collect_garbage()  # the engine's: a full collection once, then only what later simulations made
