"""FSDP2 training simulated on fake tensors: one rank's peak, with PyTorch's own ``fully_shard``.

The model is set up as TorchTitan and accelerate's FSDP2 path set it up: the training recipe
first (:func:`~estimator.peak.sim.training.prepare`: gradient checkpointing, LoRA), then
``fully_shard`` on every module whose class is in the model's ``_no_split_modules`` (the
transformer blocks; accelerate's ``transformer_layer_cls_to_wrap`` default) and on the root.
Mixed precision is FSDP2's own (``MixedPrecisionPolicy(param_dtype=<row dtype>,
reduce_dtype=float32)``, TorchTitan's default) instead of autocast: the sharded float32 master
parameters are all-gathered in the row's dtype.

It runs on fake tensors (``FakeTensorMode``) with torch.distributed's "fake" backend
(``torch.testing._internal.distributed.fake_pg.FakeStore``), which TorchTitan's ``estimation.py``
uses with ``FSDPMemTracker``; here the project's one engine
(:func:`~estimator.peak.sim.steps.simulate_step`) runs the step and its
:class:`~estimator.peak.sim.tracker.StorageTracker` counts the rank's storages: its shards of the
parameters, gradients and optimizer states (DTensors, counted by their local tensors), the
all-gather buffers and unsharded parameters (FSDP2 frees and re-allocates them with
``UntypedStorage.resize_``, which no dispatch mode sees, so it is followed here, as PyTorch's own
``MemTracker`` does), the reduce-scatter inputs, and the activations of the local micro-batch.

**Collective schedule assumed.** The fake process group completes every collective at once, so
buffers are freed in program order: the all-gather of a block's parameters is allocated in its
pre-forward (or, in backward, in the previous block's pre-backward: FSDP2's default backward
prefetch of one block, which runs as real code here) and freed when the copy-out is done; the
unsharded parameters live until the block's post-forward reshard (``reshard_after_forward=True``;
the root keeps its parameters unsharded after forward, as FSDP2 does); the reduce-scatter input of
a block lives from its post-backward until the collective returns. A real run frees some of these
later, when a background collective finishes (on CPU, gloo's threads; on CUDA, the communication
streams), which is why a rank's measured peak varies from run to run
(``bench/results/fsdp_accuracy.md``).

All ranks hold the same bytes: FSDP2 pads every sharded parameter to ``ceil(dim0 / N)`` rows, so
the simulated rank is rank 0.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

from estimator.options import Component
from estimator.peak.engine import collect_garbage
from estimator.peak.inputs.providers import workload_for
from estimator.peak.sim import steps
from estimator.peak.sim.materialize import materialize
from estimator.peak.sim.steps import simulate_step
from estimator.peak.sim.tracker import PeakSnapshot, StorageTracker
from estimator.peak.sim.training import Recipe, prepare

__all__ = ["block_modules", "fake_process_group", "shard_blocks", "simulate_fsdp_phases", "wrapped_classes"]

Phases = dict[str, PeakSnapshot]
# gloo (CPU) frees its collective buffers on a worker thread: how many of each kind are still held
# after a collective returns. The late end of what real runs show (the figure we report): 3. The
# early end, each buffer freed as its collective returns: 0 (tests/test_parallel_fsdp.py checks both).
GLOO_HELD = 3


@contextlib.contextmanager
def fake_process_group(world_size: int) -> Iterator[Any]:
    """A default process group of ``world_size`` ranks on the "fake" backend (this process is rank
    0) and its 1-D CPU device mesh; destroyed on exit. Refuses to replace a real one."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        raise RuntimeError("a torch.distributed process group is already initialised in this process; "
                           "the FSDP simulation needs its own fake one")
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world_size)
    try:
        yield init_device_mesh("cpu", (world_size,))  # outside FakeTensorMode: the mesh reads real rank tensors
    finally:
        dist.destroy_process_group()


def wrapped_classes(model: nn.Module) -> set[str]:
    """The block classes ``fully_shard`` wraps: the transformers model's ``_no_split_modules``."""
    get_base = getattr(model, "get_base_model", None)  # a peft model wraps the transformers one
    base = get_base() if callable(get_base) else model
    return set(getattr(base, "_no_split_modules", None) or ())


def block_modules(model: nn.Module) -> list[nn.Module]:
    """The modules of :func:`wrapped_classes`, but not one holding a parameter tied to a module
    outside it (BERT's word embeddings, tied to the MLM head): FSDP2 refuses a parameter in two
    groups, so such a block stays in its parent's (the root's) group."""
    classes = wrapped_classes(model)
    blocks = [m for m in model.modules() if m is not model and type(m).__name__ in classes]
    uses: dict[int, int] = {}
    for module in model.modules():
        for p in module.parameters(recurse=False):
            uses[id(p)] = uses.get(id(p), 0) + 1
    kept = []
    for block in blocks:
        inside: dict[int, int] = {}
        for module in block.modules():
            for p in module.parameters(recurse=False):
                inside[id(p)] = inside.get(id(p), 0) + 1
        if all(uses[k] == n for k, n in inside.items()):
            kept.append(block)
    return kept


def shard_blocks(model: nn.Module, mesh: Any, param_dtype: torch.dtype | None) -> int:
    """``fully_shard`` every block (:func:`wrapped_classes`), then the root; returns how many blocks."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mp = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32) if param_dtype else MixedPrecisionPolicy()
    blocks = block_modules(model)
    for block in blocks:
        fully_shard(block, mesh=mesh, mp_policy=mp)
    fully_shard(model, mesh=mesh, mp_policy=mp)
    return len(blocks)


@contextlib.contextmanager
def _follow_fsdp(tracker: StorageTracker, *, gloo: bool) -> Iterator[None]:
    """While the step runs: storage resizes reach the tracker, and what FSDP2's collectives
    allocate is labelled — the all-gathered (unsharded) parameters ``weights``, the reduce-scatter
    buffers ``gradients``."""
    from torch.distributed.fsdp._fully_shard._fsdp_param_group import FSDPParamGroup

    original_resize = torch.UntypedStorage.resize_

    def resize_(st: Any, size: int) -> Any:
        out = original_resize(st, size)
        tracker.storage_resized(st)
        return out

    def labelled(method: Any, component: Component) -> Any:
        @functools.wraps(method)
        def run(*args: Any, **kwargs: Any) -> Any:
            before = tracker.new_component
            tracker.new_component = component
            try:
                return method(*args, **kwargs)
            finally:
                tracker.new_component = before
        return run

    from torch.distributed.fsdp._fully_shard import _fsdp_collectives as collectives

    pending: dict[str, list[Any]] = {"all_gather": [], "reduce_scatter": []}

    def gloo_copy(kind: str, method: Any, full: str) -> Any:
        """gloo's CPU collectives allocate a buffer as large as the full tensor (an all-gather's
        output, a reduce-scatter's input; measured with torch.profiler on 2 gloo ranks) and free it
        on their worker thread, so when it is freed varies from run to run. The late end of what
        real runs show (bench/results/fsdp_accuracy.md) is assumed: after a collective returns,
        the buffers of the last ``GLOO_HELD`` collectives of its kind are still held (read at each
        call, so a test can simulate the early end, 0: every buffer freed as its collective returns)."""
        @functools.wraps(method)
        def run(comm: Any, *args: Any, **kwargs: Any) -> Any:
            tensor: torch.Tensor = kwargs[full] if full in kwargs else args[0 if full == "output_tensor" else 1]
            before = tracker.new_component
            tracker.new_component = Component.TEMPORARIES
            try:
                pending[kind].append(torch.empty_like(tensor))
            finally:
                tracker.new_component = before
            held = pending[kind]
            del held[:max(len(held) - max(GLOO_HELD, 1), 0)]  # this collective's own buffer lives while it runs
            try:
                return method(comm, *args, **kwargs)
            finally:
                del held[:max(len(held) - GLOO_HELD, 0)]
        return run

    original_make = steps.make_optimizer

    def local_optimizer(params: Any, name: str, device: str) -> Any:
        """The optimizer over the DTensor parameters' local shards: the same allocations as over
        the DTensors (each DTensor op runs the local op once), without DTensor's dispatch, which
        dominates the simulation's time for large models."""
        sharded = list(params)
        local = [getattr(p, "_local_tensor", p) for p in sharded]
        optimizer = original_make(local, name, device)

        def take_grads(*_: Any) -> None:
            for d, t in zip(sharded, local, strict=True):
                if t is not d:
                    t.grad = None if d.grad is None else getattr(d.grad, "_local_tensor", d.grad)

        optimizer.register_step_pre_hook(take_grads)
        zero_grad = optimizer.zero_grad

        def zero_both(set_to_none: bool = True) -> None:
            zero_grad(set_to_none=set_to_none)
            for d in sharded:
                d.grad = None
        optimizer.zero_grad = zero_both
        return optimizer

    saved = {name: getattr(FSDPParamGroup, name) for name in ("unshard", "wait_for_unshard", "post_backward")}
    torch.UntypedStorage.resize_ = resize_  # type: ignore[method-assign,assignment]  # restored below; the simulation holds a lock
    steps.make_optimizer = local_optimizer  # restored below
    FSDPParamGroup.unshard = labelled(saved["unshard"], Component.WEIGHTS)  # type: ignore[method-assign]
    FSDPParamGroup.wait_for_unshard = labelled(saved["wait_for_unshard"], Component.WEIGHTS)  # type: ignore[method-assign]
    comms = {"all_gather": (collectives.DefaultAllGather, "output_tensor"),
             "reduce_scatter": (collectives.DefaultReduceScatter, "input_tensor")}
    saved_calls = {kind: cls.__call__ for kind, (cls, _) in comms.items()}
    if gloo:
        for kind, (cls, full) in comms.items():
            cls.__call__ = gloo_copy(kind, saved_calls[kind], full)  # type: ignore[method-assign]
    FSDPParamGroup.post_backward = labelled(saved["post_backward"], Component.GRADIENTS)  # type: ignore[method-assign]
    try:
        yield
    finally:
        torch.UntypedStorage.resize_ = original_resize  # type: ignore[method-assign]
        steps.make_optimizer = original_make
        for name, method in saved.items():
            setattr(FSDPParamGroup, name, method)
        for kind, (cls, _) in comms.items():
            cls.__call__ = saved_calls[kind]  # type: ignore[method-assign]
        pending.clear()


def simulate_fsdp_phases(
    model: nn.Module, *, world_size: int, device: str, batch_size: int, seq_len: int, image_size: int | None,
    recipe: Recipe,
) -> tuple[Phases, tuple[str, ...]]:
    """One FSDP2 training step of rank 0 of ``world_size``: the peak of each phase and notes
    (the shape :func:`~estimator.peak.sim.layers.extrapolate` takes). ``model`` is on meta; consumed."""
    if recipe.kbit:
        raise ValueError("QLoRA (bitsandbytes 4-bit) under FSDP is not simulated")
    fake_mode = FakeTensorMode(static_shapes=True)
    try:
        workload = workload_for(model, batch_size=batch_size, seq_len=seq_len, image_size=image_size)
        model = prepare(model, recipe)
        materialize(model, fake_mode)
        with fake_process_group(world_size) as mesh:
            with fake_mode:
                blocks = shard_blocks(model, mesh, recipe.autocast_dtype)
            step = simulate_step(model, workload, fake_mode, mode="training", device=device,  # type: ignore[arg-type]
                                 optimizer=recipe.optimizer, autocast_dtype=None,
                                 on_tracker=functools.partial(_follow_fsdp, gloo=device == "cpu"))
        what = (f"FSDP2 over {world_size} ranks (rank 0 simulated; all ranks alike): fully_shard on every block "
                f"({', '.join(sorted(wrapped_classes(model))) if blocks else 'none: the root only'}) and on the root, "
                "reshard_after_forward, one block prefetched in backward; collectives complete in program order "
                "(fake process group)")
        if recipe.autocast_dtype is not None:
            what += (f"; mixed precision by FSDP2's MixedPrecisionPolicy(param_dtype={str(recipe.autocast_dtype).removeprefix('torch.')}, "
                     "reduce_dtype=float32) (TorchTitan's default) instead of autocast")
        return step.phases, (*step.notes, what, f"training recipe: {dataclasses.replace(recipe, autocast_dtype=None).describe()}")
    finally:
        FakeTensorMode.cache_clear()
        collect_garbage()  # the engine's: a full collection once, then only what later simulations made
