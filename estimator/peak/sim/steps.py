"""The one simulation engine: :func:`simulate_step` runs one workload on a fake-tensor model.

Every peak the project reports comes from here: :func:`~estimator.peak.engine.simulate_peak` (Hub
models, workloads from :func:`~estimator.peak.inputs.providers.workload_for`) and
:func:`~estimator.modules.estimate.estimate_module` (any ``nn.Module``, a workload built from input
sizes and a loss function) both call it. The model must already be materialised as fake tensors
(:func:`~estimator.peak.sim.materialize.materialize`) and the call made inside that ``FakeTensorMode``'s
lifetime (the engine enters it). Every storage is followed by
:class:`~estimator.peak.sim.tracker.StorageTracker`; on ``device="cpu"`` the kernels' hidden buffers
come from the one CPU model, :func:`~estimator.peak.kernels.cpu.workspace.cpu_workspace`; on ``device="cuda"``
the optimizers are the multi-tensor (``foreach``) ones CUDA tensors default to and SDPA is
modelled as CUDA's fused kernels (:mod:`estimator.peak.kernels.cuda.sdpa`).

- ``mode="inference"``: the workload's ``infer`` under ``no_grad`` in ``eval()`` mode; the output
  stays alive to the end. Generative workloads (causal / encoder-decoder LM) label the returned
  cache ``kv_cache`` (and SSM / linear-attention layers' states ``conv_state`` and ``ssm_state``:
  :mod:`estimator.peak.sim.caches`), and with ``max_new_tokens`` a causal LM's last decode step is a second phase.
- ``mode="training"``: two steps of ``train_loss`` (forward and loss; the output is dropped once
  the loss exists), backward, ``optimizer.step()`` and ``zero_grad(set_to_none=True)``, with the
  forward under autocast when ``autocast_dtype`` is given (mixed precision; the device's op policy). The peak is taken
  over step 2, when the optimizer states exist, in two phases (forward + backward, optimizer
  step). Step 1 only leaves the optimizer states behind, so by default it is run as zero
  gradients + ``optimizer.step()``; ``full_first_step=True`` runs it in full, for modules that
  create state in their first forward (lazy modules, caches). The optimizer keeps state only for
  the parameters the backward reached (``AdamW`` and the others skip a ``grad`` of None): where
  step 2's backward leaves some trainable parameters without a gradient (a head the loss does not
  use: the Qwen2.5-VL vision tower's merger under a loss on ``last_hidden_state``), step 1 did the
  same work and reached the same ones, so the step is simulated again with zero gradients for
  those it reached only. Not under the routing assumption (``Workload.states_for_all``): experts
  that no token reaches when the router's scores tie get tokens in a real run, and their states.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

from estimator.options import Component
from estimator.peak.fakes.lru_shim import fresh_lru_caches
from estimator.peak.fakes.shims import StandIns, cpu_rng_states, unpadded_masks
from estimator.peak.kernels.cpu.workspace import cpu_kernels, cpu_workspace
from estimator.peak.kernels.cuda.allocator import AllocatorPeaks, replay
from estimator.peak.sim.caches import cache_argument, label_cache, returned_cache
from estimator.peak.sim.caches import tensors_in as _tensors_in
from estimator.peak.sim.prefill import generate_kwargs, prefill_kwargs
from estimator.peak.sim.tracker import PeakSnapshot, StorageRecord, StorageTracker
from estimator.peak.sim.training import OPTIMIZERS, Recipe, make_optimizer
from estimator.peak.workload import ModelKind, Workload

__all__ = ["OPTIMIZERS", "Recipe", "StepPeak", "make_optimizer", "simulate_step"]

Mode = Literal["inference", "training"]
Device = Literal["cpu", "cuda"]


# A what-if phase of a training step, not part of its peak: a hand-written loop that keeps the
# model's ``outputs`` alive through backward() and the optimizer step (Trainer keeps only the loss).
OUTPUTS_KEPT = "if_outputs_kept:"  # + the phase
# What is live once a phase is over, not part of its peak: ``AFTER + "prefill"`` is the cache the
# prefill returns, ``AFTER + "decode"`` the cache as the last decode step leaves it (at the step's
# peak, ``torch.cat`` in ``DynamicLayer.update`` still holds one layer's old keys or values beside the
# new ones).
AFTER = "after:"  # + the phase


@dataclass(frozen=True)
class StepPeak:
    """The peak of each phase of the step (``forward``/``prefill``/``decode`` or
    ``forward_backward``/``optimizer_step``) and notes on the work simulated."""

    phases: dict[str, PeakSnapshot]
    notes: tuple[str, ...]
    # device="cuda": the caching allocator replayed over the whole trace (estimator.peak.kernels.cuda.allocator)
    allocator: AllocatorPeaks | None = None
    # device="cuda": the trace the allocator was replayed over (``StorageTracker.events``): layer samples'
    # traces make the whole model's (estimator.peak.sim.layer_trace)
    events: list[tuple[int, int]] | None = field(default=None, repr=False, compare=False)
    # device="cuda": what each of ``events``' records holds at the step's end (by record index; a trace written from
    # one layer sample takes its breakdown from them, estimator.peak.sim.layers)
    labels: list[str] | None = field(default=None, repr=False, compare=False)

    @property
    def phase(self) -> str:
        """The phase that holds the step's peak (the first one on a tie)."""
        return max(((k, v) for k, v in self.phases.items() if not k.startswith((OUTPUTS_KEPT, AFTER))), key=lambda item: item[1].peak_bytes)[0]

    @property
    def peak(self) -> PeakSnapshot:
        return self.phases[self.phase]

    @property
    def outputs_kept(self) -> PeakSnapshot | None:
        """Training: the peak had the model's outputs stayed alive through backward() and the
        optimizer step (a hand-written loop, ``out = model(x); out.sum().backward(); opt.step()``),
        never below :attr:`peak`; None where the step has no such phase (inference)."""
        kept = [v for k, v in self.phases.items() if k.startswith(OUTPUTS_KEPT)]
        if not kept:
            return None
        best = max(kept, key=lambda v: v.peak_bytes)
        return best if best.peak_bytes > self.peak.peak_bytes else self.peak


UNREACHED_KEPT_NOTE = ("training: optimizer states counted for every trainable parameter, also those the backward "
                       "leaves without a gradient (which a real run keeps none for): the step could not be simulated "
                       "a second time without them")


def simulate_step(
    model: nn.Module,
    workload: Workload,
    fake_mode: FakeTensorMode,
    *,
    mode: Mode,
    device: Device,
    optimizer: str = "adamw",
    autocast_dtype: torch.dtype | None = None,
    max_new_tokens: int = 0,
    full_first_step: bool = False,
    on_tracker: Callable[[StorageTracker], contextlib.AbstractContextManager[Any]] | None = None,
) -> StepPeak:
    """Simulate one inference or training step of ``model`` (materialised in ``fake_mode``) on
    ``workload``; see the module docstring. ``on_tracker(tracker)``, when given, is a context entered
    around the step with the step's tracker (the parallel simulations label and follow what their
    collectives allocate). Raises where the model's code fails on fakes."""
    if mode not in ("inference", "training"):
        raise ValueError(f"mode must be 'inference' or 'training', not {mode!r}")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', not {device!r}")
    kernels = cpu_kernels(optimizer) if device == "cpu" and mode == "training" else {}
    autocast = functools.partial(_autocast, autocast_dtype, device)

    def attempt(reached: frozenset[int] | None) -> tuple[StepPeak, StorageTracker, frozenset[int] | None]:
        tracker = StorageTracker(cpu_workspace if device == "cpu" else None, kernels)
        rng = cpu_rng_states() if device == "cpu" else contextlib.nullcontext()  # on CUDA they are host memory
        hooks = on_tracker(tracker) if on_tracker is not None else contextlib.nullcontext()  # e.g. FSDP2's collectives (estimator.peak.parallel.fsdp)
        with _target_device(device), unpadded_masks(), fresh_lru_caches(), rng, hooks:
            if mode == "training":
                step, got = _training(model, workload, fake_mode, tracker, device, optimizer, autocast, full_first_step,
                                      reached)
                return step, tracker, got
            return _inference(model, workload, fake_mode, tracker, max_new_tokens, autocast), tracker, None

    step, tracker, got = attempt(None)
    if got is not None and not full_first_step and not workload.states_for_all and len(got) < len(_trainable(model)):
        # Step 2's backward left trainable parameters without gradients: so did step 1's, and the optimizer made no
        # state for them (see the module docstring). Again, with zero gradients for the reached ones only.
        try:
            step, tracker, _ = attempt(got)
        except Exception:  # noqa: BLE001 - a model that keeps state across runs (OmDet-Turbo's cached text graph)
            step = replace(step, notes=(*step.notes, UNREACHED_KEPT_NOTE))
    if device == "cuda":  # what PyTorch's caching allocator would reserve for this trace
        events = tracker.events()
        step = replace(step, allocator=replay(events), events=events, labels=tracker.labels())
    return step


def _autocast(dtype: torch.dtype | None, device: Device) -> Any:
    """Autocast in ``dtype`` with the target device's op policy, or nothing. The fakes are CPU
    tensors: on ``cuda`` CPU autocast runs with CUDA's policy (:mod:`estimator.peak.kernels.cuda.autocast`)."""
    if dtype is None:
        return contextlib.nullcontext()
    if device == "cuda":
        from estimator.peak.kernels.cuda.autocast import cuda_autocast_policy

        return cuda_autocast_policy(dtype)
    return torch.autocast("cpu", dtype=dtype)


@contextlib.contextmanager
def _target_device(device: Device) -> Iterator[None]:
    if device == "cuda":
        from estimator.peak.kernels.cuda.dropout import cuda_dropout
        from estimator.peak.kernels.cuda.sdpa import cuda_sdpa

        with cuda_sdpa(), cuda_dropout():
            yield
    else:
        yield


def _workload_context(workload: Workload) -> contextlib.AbstractContextManager[Any]:
    """What the workload asks to have entered around its step, above the tracker (a media workload's
    known input values: :mod:`estimator.peak.fakes.known_values`)."""
    context = getattr(workload, "context", None)
    return context() if context is not None else contextlib.nullcontext()


def _unique_tensors(tensors: Any) -> list[torch.Tensor]:
    return list({id(t): t for t in tensors}.values())


def _register_model(tracker: StorageTracker, model: nn.Module) -> None:
    for t in _unique_tensors([*model.parameters(), *model.buffers()]):
        tracker.register(t, Component.WEIGHTS)


def _state_tensors(optimizer: torch.optim.Optimizer) -> Iterator[torch.Tensor]:
    for state in optimizer.state.values():
        for v in state.values():
            if isinstance(v, torch.Tensor):
                yield v


def _trainable(model: nn.Module) -> list[torch.Tensor]:
    return [p for p in _unique_tensors(model.parameters()) if p.requires_grad]


def _training(
    model: nn.Module, workload: Workload, fake_mode: FakeTensorMode, tracker: StorageTracker, device: Device,
    optimizer_name: str, autocast: Any, full_first_step: bool, reached: frozenset[int] | None = None,
) -> tuple[StepPeak, frozenset[int]]:
    """The training step (see the module docstring) and the ids of the parameters step 2's backward gave a
    gradient. ``reached``: the ids of those step 1's zero gradients go to (every trainable parameter when None)."""
    model.train()
    params = _trainable(model)
    optimizer = make_optimizer(params, optimizer_name, device)
    if hasattr(optimizer, "fill_qmap"):  # bitsandbytes: its quantization maps (2 x 1 KiB) as fakes, as the kernels need
        optimizer.fill_qmap()
        optimizer.name2qmap = {k: fake_mode.from_tensor(v) for k, v in optimizer.name2qmap.items()}
    notes = (f"training: 2 steps of forward + loss + backward + optimizer step, peak of step 2 ({workload.description})",)
    with fake_mode, tracker, _workload_context(workload):
        _register_model(tracker, model)
        tracker.new_component = Component.INPUTS
        inputs = workload.make_inputs()
        if full_first_step:
            _forward_backward(model, workload, inputs, tracker, params, autocast)
        else:  # the states by the optimizer's own lazy initialisation, without forward and backward
            tracker.new_component = Component.GRADIENTS
            for p in params:
                if reached is None or id(p) in reached:
                    p.grad = torch.zeros_like(p)
        tracker.new_component = Component.TEMPORARIES
        optimizer.step()
        tracker.relabel(_state_tensors(optimizer), Component.OPTIMIZER_STATES)
        optimizer.zero_grad(set_to_none=True)
        # Step 2, tracked from here.
        tracker.reset_peak()
        since = tracker.clock
        outputs = _forward_backward(model, workload, inputs, tracker, params, autocast, counted=True)
        got = frozenset(id(p) for p in params if p.grad is not None)
        phases = {"forward_backward": tracker.snapshot()}
        tracker.reset_peak()
        between = tracker.clock
        tracker.new_component = Component.TEMPORARIES
        tracker.phase = "optimizer"
        optimizer.step()
        tracker.phase = None
        tracker.relabel(_state_tensors(optimizer), Component.OPTIMIZER_STATES)
        phases["optimizer_step"] = tracker.snapshot()
        end = tracker.clock + 1
        # Each phase with the outputs kept to the end of the step, so that each stays linear in layers.
        phases[OUTPUTS_KEPT + "forward_backward"] = tracker.snapshot_if_kept(outputs, since, between, end)
        phases[OUTPUTS_KEPT + "optimizer_step"] = tracker.snapshot_if_kept(outputs, between, end, end)
        optimizer.zero_grad(set_to_none=True)
        del inputs
    return StepPeak(phases, notes), got


def _forward_backward(
    model: nn.Module, workload: Workload, inputs: dict[str, torch.Tensor], tracker: StorageTracker,
    params: Sequence[torch.Tensor], autocast: Any, counted: bool = False,
) -> list[StorageRecord]:
    """Forward, loss and backward; returns the records of what the model's forward returned. ``counted``: the
    tracker's phase says ``train_forward`` and ``backward`` meanwhile (the measured step)."""
    outputs: list[StorageRecord] = []
    hook = model.register_forward_hook(lambda _m, _i, out: outputs.extend(tracker.records_of(_tensors_in(out))))
    tracker.new_component = Component.ACTIVATIONS
    tracker.phase = "train_forward" if counted else None
    try:
        with autocast():
            loss = workload.train_loss(model, inputs)
    finally:
        hook.remove()
    tracker.new_component = Component.TEMPORARIES
    tracker.phase = "backward" if counted else None
    loss.backward()
    tracker.phase = None
    del loss
    tracker.relabel((p.grad for p in params if p.grad is not None), Component.GRADIENTS)
    return outputs


def _inference(
    model: nn.Module, workload: Workload, fake_mode: FakeTensorMode, tracker: StorageTracker, max_new_tokens: int,
    autocast: Any,
) -> StepPeak:
    model.eval()
    generative = workload.kind in (ModelKind.CAUSAL_LM, ModelKind.SEQ2SEQ_LM)
    with fake_mode, torch.no_grad():
        with tracker, _workload_context(workload):
            _register_model(tracker, model)
            tracker.new_component = Component.INPUTS
            inputs = workload.make_inputs()
            tracker.new_component = Component.ACTIVATIONS
            tracker.phase = "prefill" if generative else "forward"
            with autocast():
                out = workload.infer(model, inputs)
            tracker.phase = None
            label_cache(tracker, returned_cache(out))
            phases = {"prefill" if generative else "forward": tracker.snapshot()}
            if generative:  # what the prefill leaves: the cache generate decodes from
                tracker.reset_peak()
                phases[AFTER + "prefill"] = tracker.snapshot()
        if generative:
            notes = [f"inference: generate's prefill ({workload.description}), KV cache on"]
        else:
            notes = [f"inference: one forward under no_grad ({workload.description})"]
        if max_new_tokens > 0 and workload.kind is ModelKind.CAUSAL_LM:
            del out
            decode = getattr(workload, "decode", None)  # a media workload keeps the image state (estimator.peak.inputs.prompts.generation)
            phases["decode"], phases[AFTER + "decode"] = (
                _last_decode_step(model, inputs, tracker, max_new_tokens) if decode is None
                else _media_decode_step(model, inputs, tracker, max_new_tokens, decode, workload))
            notes.append(f"last decode step at context {inputs['input_ids'].shape[1] + max_new_tokens}")
        elif max_new_tokens > 0 and workload.kind is ModelKind.SEQ2SEQ_LM:
            notes.append("max_new_tokens: decoder cache growth of encoder-decoder models not simulated")
    return StepPeak(phases, tuple(notes))


def _media_decode_step(
    model: nn.Module, inputs: dict[str, torch.Tensor], tracker: StorageTracker, max_new_tokens: int, decode: Any,
    workload: Workload,
) -> tuple[PeakSnapshot, PeakSnapshot]:
    """The last decode step of a prompt with images: ``decode`` runs the prefill and the tokens before the last
    (tracked, so that what it keeps alive is counted) and calls back before the last step, where the measured
    window starts. Returns the step's peak and what is live when it returns."""

    def before_last(cache: Any) -> None:
        tracker.reset_peak()
        label_cache(tracker, cache)
        tracker.new_component = Component.ACTIVATIONS
        tracker.phase = "decode"

    with tracker, _workload_context(workload):
        tracker.new_component = Component.ACTIVATIONS
        step = decode(model, inputs, max_new_tokens, before_last)
        tracker.phase = None
        label_cache(tracker, returned_cache(step))
        peak = tracker.snapshot()
        tracker.reset_peak()  # the window is now the instant the step returns
        return peak, tracker.snapshot()


def _last_decode_step(
    model: nn.Module, inputs: dict[str, torch.Tensor], tracker: StorageTracker, max_new_tokens: int
) -> tuple[PeakSnapshot, PeakSnapshot]:
    """The last token ``generate`` decodes: the cache already holds the prompt and all tokens
    generated but the last. The cache is filled by an untracked prefill; only the step is tracked.
    Returns the step's peak and what is live when it returns (the cache of the whole context)."""
    ids = inputs["input_ids"]
    b, n = ids.shape
    kwargs = prefill_kwargs(model)
    with StandIns():  # untracked, with the fake kernels' stand-ins the tracked step gets
        out = model(input_ids=torch.zeros(b, n + max_new_tokens - 1, dtype=ids.dtype), **kwargs)
    cache = returned_cache(out)
    del out
    with tracker:
        tracker.reset_peak()
        label_cache(tracker, cache)
        tracker.new_component = Component.INPUTS  # generate's mask and positions for the whole context
        kept = generate_kwargs(model, b, n + max_new_tokens)
        if "position_ids" in kept:  # the model gets the last token's
            kept["position_ids"] = kept["position_ids"][:, -1:]
        tracker.new_component = Component.ACTIVATIONS
        token = torch.zeros(b, 1, dtype=ids.dtype)  # the token the last step sampled (no kernel of this step)
        tracker.phase = "decode"
        step = model(
            input_ids=token,
            **{cache_argument(model): cache},
            use_cache=True,
            **kept,
            **({"logits_to_keep": 1} if "logits_to_keep" in kwargs else {}),
        )
        tracker.phase = None
        label_cache(tracker, returned_cache(step))
        peak = tracker.snapshot()
        tracker.reset_peak()  # the window is now the instant the step returns
        return peak, tracker.snapshot()
