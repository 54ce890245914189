"""Per-GPU peak of a step spread over several GPUs: :func:`simulate_parallel`, the sibling of
:func:`~estimator.peak.engine.simulate_peak` for ``--strategy``.

- ``fsdp`` (training): FSDP2 simulated on fake tensors with a fake process group
  (:mod:`estimator.peak.parallel.fsdp`); every training option combines (the recipe is applied before
  ``fully_shard``).
- ``tp`` (inference): transformers' TP plan applied on fake tensors (:mod:`estimator.peak.parallel.tp`).
- ``ddp``: every rank runs the single-GPU step (simulated), plus DDP's gradient buckets
  (:func:`~estimator.peak.parallel.zero.ddp_bucket_bytes`).
- ``zero1``/``zero2``/``zero3`` (DeepSpeed): the model states per rank from
  :func:`~estimator.peak.parallel.zero.zero_model_states` (DeepSpeed's accounting, checked against its
  own estimators) and, from the simulated single-GPU step of the local micro-batch, the
  activations, temporaries and inputs of its forward+backward, and its optimizer step's
  temporaries divided by the ranks (each rank steps its partition). DeepSpeed's engine cannot run
  on fake tensors, so this part is a composition, said so in the notes.

Decoders with alike layers are simulated with 2, 3 and 4 layers and extrapolated when exactly
linear (:mod:`estimator.peak.sim.layers`), as for one GPU.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from torch import nn

from estimator.options import Component, Offload, ParallelSpec, Strategy
from estimator.peak.engine import PeakResult, collect_garbage, run_simulation
from estimator.peak.inputs.providers import workload_for
from estimator.peak.parallel.zero import StateBytes, ddp_bucket_bytes, zero_model_states
from estimator.peak.sim.formula import state_bytes
from estimator.peak.sim.layers import SAMPLE_LAYERS, extrapolated
from estimator.peak.sim.materialize import materialize
from estimator.peak.sim.steps import OUTPUTS_KEPT, StepPeak, simulate_step
from estimator.peak.sim.tracker import PeakSnapshot, StorageTracker
from estimator.peak.sim.training import Recipe, prepare

__all__ = ["ParallelResult", "simulate_parallel"]


Phases = dict[str, PeakSnapshot]
FSDP_SAMPLE_LAYERS = (3, 4, 5)
Runner = Callable[[nn.Module], tuple[Phases, tuple[str, ...]]]


@dataclass(frozen=True)
class ParallelResult:
    """One GPU's peak (``peak``: components sum to it) and the host memory an offload needs per node."""

    peak: PeakResult
    cpu_bytes: int | None = None


def simulate_parallel(
    model: nn.Module, spec: ParallelSpec, *, mode: str, device: str = "cuda", batch_size: int = 1, seq_len: int = 512,
    image_size: int | None = None, max_new_tokens: int = 0, recipe: Recipe | None = None, extrapolate_layers: bool = True,
) -> ParallelResult:
    """The per-GPU peak of ``model`` (built on meta; consumed) under ``spec``; see the module docstring."""
    recipe = recipe or Recipe()
    strategy = spec.strategy
    if strategy is None:
        raise ValueError("spec.strategy is None: use estimator.peak.simulate_peak for one GPU")
    n = spec.world_size
    if strategy is Strategy.TP:
        from estimator.peak.parallel.tp import simulate_tp_phases

        def tp(m: nn.Module) -> tuple[Phases, tuple[str, ...]]:
            return simulate_tp_phases(m, tp_size=n, device=device, batch_size=batch_size, seq_len=seq_len,
                                      image_size=image_size, max_new_tokens=max_new_tokens)
        phases, notes = _phases(model, tp, extrapolate_layers)
        return ParallelResult(_peak(phases, notes))
    if mode != "training":
        raise ValueError(f"{strategy.value} is a training strategy")
    if strategy is Strategy.FSDP:
        from estimator.peak.parallel.fsdp import simulate_fsdp_phases

        def fsdp(m: nn.Module) -> tuple[Phases, tuple[str, ...]]:
            return simulate_fsdp_phases(m, world_size=n, device=device, batch_size=batch_size, seq_len=seq_len,
                                        image_size=image_size, recipe=recipe)
        # With 2 blocks FSDP's peak sits elsewhere in the step (the root's and one block's gathers dominate): 3, 4, 5 are linear.
        phases, notes = _phases(model, fsdp, extrapolate_layers, FSDP_SAMPLE_LAYERS)
        return ParallelResult(_peak(phases, notes))
    counts = _counts(model, recipe)
    step_recipe = recipe
    if strategy is not Strategy.DDP and recipe.autocast_dtype is not None:
        # DeepSpeed's bf16/fp16 mode: the module itself in 16 bits (no autocast, no weight-cast cache);
        # the float32 master weights live in the optimizer's partitions (counted by zero_model_states).
        model = model.to(recipe.autocast_dtype)
        step_recipe = dataclasses.replace(recipe, autocast_dtype=None, adapters_in_float32=False)

    def single(m: nn.Module) -> tuple[Phases, tuple[str, ...]]:
        if strategy is Strategy.DDP:
            return run_simulation(m, "training", device, batch_size, seq_len, image_size, 0, step_recipe)[:2]  # type: ignore[arg-type]
        return _local_step(m, device, batch_size, seq_len, image_size, step_recipe)
    phases, notes = _phases(model, single, extrapolate_layers)
    if strategy is Strategy.DDP:
        return ParallelResult(_ddp(phases, notes, counts, n))
    return _zero(phases, notes, counts, spec, recipe)


WORK = "work"  # the ZeRO runner's extra phase: the step's peak without model states


def _local_step(model: nn.Module, device: str, batch_size: int, seq_len: int, image_size: int | None,
                recipe: Recipe) -> tuple[Phases, tuple[str, ...]]:
    """The single-GPU step of the local micro-batch by the engine, plus phase :data:`WORK`: its peak
    had the weights, gradients and optimizer states taken no memory (ZeRO partitions those; what
    is left peaks where activations do, not where the single GPU's total does)."""

    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    if recipe.kbit:
        raise ValueError("QLoRA (bitsandbytes 4-bit) under DeepSpeed ZeRO is not simulated")
    work: list[PeakSnapshot] = []

    @contextlib.contextmanager
    def measure_work(tracker: StorageTracker) -> Iterator[None]:
        marks: list[int] = []  # the clock at step 2's forward, then at its optimizer step
        forward = model.register_forward_pre_hook(lambda *_: marks.append(tracker.clock) if not marks else None)
        stepping = register_optimizer_step_pre_hook(lambda *_: marks.append(tracker.clock) if len(marks) == 1 else None)
        try:
            yield
        finally:
            forward.remove()
            stepping.remove()
        work.append(tracker.peak_excluding((Component.WEIGHTS, Component.GRADIENTS, Component.OPTIMIZER_STATES), *marks[:2]))

    fake_mode = FakeTensorMode(static_shapes=True)
    try:
        workload = workload_for(model, batch_size=batch_size, seq_len=seq_len, image_size=image_size)
        model = prepare(model, recipe)
        materialize(model, fake_mode)
        step = simulate_step(model, workload, fake_mode, mode="training", device=device,  # type: ignore[arg-type]
                             optimizer=recipe.optimizer, autocast_dtype=recipe.autocast_dtype, on_tracker=measure_work)
        return {**step.phases, WORK: work[0]}, (*step.notes, f"training recipe: {recipe.describe()}")
    finally:
        FakeTensorMode.cache_clear()
        collect_garbage()  # the engine's: a full collection once, then only what later simulations made


def _phases(model: nn.Module, run: Runner, extrapolate_layers: bool,
            sizes: tuple[int, int, int] = SAMPLE_LAYERS) -> tuple[Phases, tuple[str, ...]]:
    found = extrapolated(model, run, sizes, min_layers=sizes[-1] + 2) if extrapolate_layers else None
    if found is not None:  # the CUDA allocator's overheads are not modelled per GPU under a strategy
        phases, notes, note, _ = found
        return phases, (*notes, note)
    return run(model)


def _peak(phases: Phases, notes: tuple[str, ...], extra: tuple[str, ...] = ()) -> PeakResult:
    step = StepPeak(phases, notes)  # the engine's choice of phase (neither the kept-outputs loop nor an "after" snapshot)
    snap = step.peak
    return PeakResult(snap.peak_bytes, dict(snap.components), "simulated", (*notes, *extra, f"peak in phase: {step.phase}"))


@dataclass(frozen=True)
class _Counts:
    trainable: int  # parameters that train (LoRA: the adapters)
    trainable_elsize: int  # bytes per element of the trainable parameters as built
    optimizer_bytes: int  # the optimizer's states for every trainable parameter (formula.state_bytes)
    frozen_bytes: int  # parameters that do not train (LoRA's base)
    buffer_bytes: int
    largest_block: int  # parameters of the largest transformer block (ZeRO-3's live unit)


def _counts(model: nn.Module, recipe: Recipe) -> _Counts:
    adapted = prepare(copy.deepcopy(model), Recipe(lora_rank=recipe.lora_rank, lora_targets=recipe.lora_targets)) \
        if recipe.lora_rank is not None else model
    params = list({id(p): p for p in adapted.parameters()}.values())
    trainable = [p for p in params if p.requires_grad]
    master = 4 if recipe.autocast_dtype is not None else (trainable[0].element_size() if trainable else 4)
    no_split = set(getattr(model, "_no_split_modules", None) or ())
    blocks = [m for m in model.modules() if type(m).__name__ in no_split] or [m for m in model.modules() if not list(m.children())]
    return _Counts(
        trainable=sum(p.numel() for p in trainable),
        trainable_elsize=trainable[0].element_size() if trainable else 4,
        optimizer_bytes=sum(state_bytes(tuple(p.shape), master, recipe.optimizer) for p in trainable),
        frozen_bytes=sum(p.numel() * p.element_size() for p in params if not p.requires_grad),
        buffer_bytes=sum({id(b): b.numel() * b.element_size() for b in model.buffers()}.values()),
        largest_block=max((sum(p.numel() for p in b.parameters()) for b in blocks), default=0),
    )


def _ddp(phases: Phases, notes: tuple[str, ...], counts: _Counts, n: int) -> PeakResult:
    buckets = ddp_bucket_bytes([counts.trainable * counts.trainable_elsize])
    grown = {}
    for name, snap in phases.items():
        comps = dict(snap.components)
        comps[Component.GRADIENTS.value] = comps.get(Component.GRADIENTS.value, 0) + buckets
        grown[name] = PeakSnapshot(snap.peak_bytes + buckets, comps)
    note = (f"DDP over {n} GPUs: every rank runs the whole step on its micro-batch (simulated) and holds "
            f"DDP's gradient buckets ({buckets:,} bytes: gradient_as_bucket_view=False, bucket_cap_mb=25, torch's defaults) "
            "for the whole step (a bound: buckets are allocated when DDP is built)")
    return _peak(grown, notes, (note,))


def _state_bytes(counts: _Counts, recipe: Recipe) -> StateBytes:
    if recipe.autocast_dtype is not None:  # DeepSpeed's 16-bit training: 16-bit params and grads, float32 master and grads
        return StateBytes(params=2, grads=2, master=4, grad_fp32=4, optimizer=0)
    e = counts.trainable_elsize
    return StateBytes(params=e, grads=e, master=0, grad_fp32=0, optimizer=0)


def _zero(phases: Phases, notes: tuple[str, ...], counts: _Counts, spec: ParallelSpec, recipe: Recipe) -> ParallelResult:
    assert spec.strategy is not None
    strategy: Any = spec.strategy.value
    n, offload = spec.world_size, spec.offload
    states = zero_model_states(strategy, counts.trainable, gpus_per_node=spec.gpus, nodes=spec.nodes, offload=offload.value,
                               largest_layer_params=counts.largest_block, state=_state_bytes(counts, recipe))
    optimizer = 0 if offload is not Offload.NONE else -(-counts.optimizer_bytes // n)
    frozen = -(-counts.frozen_bytes // n) if spec.strategy is Strategy.ZERO3 else counts.frozen_bytes
    model_states = {
        Component.WEIGHTS.value: states.weights + frozen + counts.buffer_bytes,
        Component.GRADIENTS.value: states.gradients,
        Component.OPTIMIZER_STATES.value: states.optimizer_states + optimizer,
    }
    work = (Component.ACTIVATIONS.value, Component.TEMPORARIES.value, Component.INPUTS.value, Component.KV_CACHE.value)
    composed = {}
    for name, snap in phases.items():
        if name.startswith(OUTPUTS_KEPT) or name == "forward_backward":  # WORK: forward+backward without model states
            continue
        comps = {k: v for k, v in snap.components.items() if k in work}
        if name == "optimizer_step" and Component.TEMPORARIES.value in comps:  # each rank steps its partition
            comps[Component.TEMPORARIES.value] = 0 if offload is not Offload.NONE else -(-comps[Component.TEMPORARIES.value] // n)
        comps = {k: v for k, v in {**model_states, **comps}.items() if v}
        composed[name] = PeakSnapshot(sum(comps.values()), comps)
    stage = spec.strategy.value.replace("zero", "ZeRO-")
    note = (f"DeepSpeed {stage} over {n} GPUs ({spec.gpus} per node x {spec.nodes} nodes), offload {offload.value}: model states per "
            "rank by DeepSpeed's accounting (estimator/peak/parallel/zero.py, equal to its own estimators"
            + (", 16-bit parameters and gradients, float32 master weights and gradients; the local step simulated with the "
               "module in 16 bits, as DeepSpeed's bf16/fp16 mode runs it" if recipe.autocast_dtype is not None else "")
            + f"); {'live ZeRO-3 unit: the largest block, ' + format(counts.largest_block, ',') + ' parameters; ' if stage == 'ZeRO-3' else ''}"
            "activations, temporaries and inputs of the local micro-batch from the simulated single-GPU step (DeepSpeed's engine "
            "cannot run on fake tensors), the optimizer step's temporaries divided by the ranks")
    cpu = states.cpu_bytes if offload is not Offload.NONE else None
    extra = (note,) if cpu is None else (note, f"host memory per node (cpu_bytes): DeepSpeed's own estimate, {cpu:,} bytes "
                                               "(its additional_buffer_factor 1.5, Adam)")
    return ParallelResult(_peak(composed, notes, extra), cpu)
