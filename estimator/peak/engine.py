"""The public entry of the peak-memory simulator: ``simulate_peak``.

The model's own forward (and, for training, backward and ``torch.optim.AdamW`` step) runs on fake
tensors under :class:`~estimator.peak.tracker.StorageTracker`; the result is the peak of live
tensor bytes — what ``torch.cuda.max_memory_allocated()`` (or the CPU allocator's high-water mark)
would report, without allocator rounding or the runtime's own memory — and what held it.

Work simulated:

- ``mode="inference"``: the first forward of ``generate`` (prefill) under ``no_grad``, with a
  ``DynamicCache`` and ``logits_to_keep=1`` where the model accepts it (transformers 5 sets it so
  that only the last position's logits are computed). With ``max_new_tokens > 0`` the last decode
  step is simulated too — one token against a cache holding ``seq_len + max_new_tokens - 1``
  positions — and the peak is the larger of the two. Models that are not generative run one
  ``no_grad`` forward.
- ``mode="training"``: two steps of forward with the model's own loss, backward, ``AdamW.step()``
  and ``zero_grad(set_to_none=True)``; the peak is taken over the second step, when the optimizer
  states exist.

``device="cpu"`` reproduces a CPU run exactly as PyTorch would do it (its SDPA kernel choice, the
for-loop AdamW that CPU tensors default to). ``device="cuda"`` runs on the same CPU fakes but
reproduces CUDA's choices: ``foreach`` AdamW, and SDPA modelled as the flash / memory-efficient
kernels (see :mod:`estimator.peak.cuda_sdpa`).
"""

from __future__ import annotations

import contextlib
import gc
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

from estimator.peak.components import Component
from estimator.peak.formula import formula_components
from estimator.peak.inputs import ModelKind, Workload, workload_for
from estimator.peak.layers import SAMPLE_LAYERS, extrapolate, layer_count
from estimator.peak.materialize import materialize
from estimator.peak.tracker import PeakSnapshot, StorageTracker, WorkspaceModel
from estimator.peak.workspace import cpu_workspace

__all__ = ["PeakResult", "simulate_peak"]

logger = logging.getLogger(__name__)

Mode = Literal["inference", "training"]
Device = Literal["cpu", "cuda"]
Method = Literal["simulated", "formula"]
Phases = dict[str, PeakSnapshot]  # phase of the step -> its peak and breakdown


@dataclass(frozen=True)
class PeakResult:
    """Peak of live tensor bytes and what held it at that instant.

    ``components`` uses the keys of :class:`~estimator.peak.components.Component` (only those
    that are non-zero) and always sums exactly to ``peak_bytes``.
    """

    peak_bytes: int
    components: dict[str, int]
    method: Method
    notes: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if sum(self.components.values()) != self.peak_bytes:
            raise ValueError("components must sum to peak_bytes")
        unknown = set(self.components) - {c.value for c in Component}
        if unknown:
            raise ValueError(f"unknown components {sorted(unknown)}")


def simulate_peak(
    model: nn.Module,
    *,
    mode: Mode,
    device: Device = "cuda",
    batch_size: int = 1,
    seq_len: int = 512,
    image_size: int | None = None,
    max_new_tokens: int = 0,
    extrapolate_layers: bool = True,
) -> PeakResult:
    """Simulate the peak memory of one inference or training step of ``model``.

    ``model`` must be built on the meta device in the dtype of the row (transformers:
    ``cls._from_config(config, dtype=...)`` under ``torch.device("meta")``; timm:
    ``timm.create_model(name, pretrained=False)`` under ``torch.device("meta")``). It is
    consumed: its tensors are replaced by fake tensors. ``seq_len`` is used by text models,
    ``image_size`` (default: from the config / pretrained config) by vision models. Where the
    model's code cannot run on fake tensors the result falls back to
    :func:`~estimator.peak.formula.formula_components` with ``method="formula"`` and a note.
    With ``extrapolate_layers`` (default), a decoder with many alike layers is simulated with 2,
    3 and 4 layers and extrapolated when those are exactly linear (:mod:`estimator.peak.layers`);
    otherwise the full model is simulated.
    """
    if mode not in ("inference", "training"):
        raise ValueError(f"mode must be 'inference' or 'training', not {mode!r}")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', not {device!r}")
    if min(batch_size, seq_len) < 1 or max_new_tokens < 0:
        raise ValueError("batch_size and seq_len must be >= 1 and max_new_tokens >= 0")
    n_layers = layer_count(model) if extrapolate_layers else None
    if n_layers is not None:
        try:
            found = extrapolate(model, n_layers, lambda m: _run(m, mode, device, batch_size, seq_len,
                                                               image_size, max_new_tokens))
        except Exception:  # the full simulation below reports the failure
            logger.debug("layer extrapolation failed", exc_info=True)
            found = None
        if found is not None:
            phases, notes = found
            note = f"{n_layers} alike layers: simulated with {SAMPLE_LAYERS} layers, extrapolated (exactly linear)"
            return _result(phases, (*notes, note))
    try:
        return _result(*_run(model, mode, device, batch_size, seq_len, image_size, max_new_tokens))
    except Exception as exc:  # the model's code could not run on fake tensors
        logger.warning("simulation failed for %s: %s", type(model).__name__, exc, exc_info=True)
        comps = formula_components(model, mode)
        note = (
            f"simulation failed ({type(exc).__name__}: {exc}); formula used: weights"
            + (" + gradients + AdamW states" if mode == "training" else "")
            + ", activations and temporaries not counted"
        )
        return PeakResult(sum(comps.values()), comps, "formula", (note,))


def _result(phases: Phases, notes: tuple[str, ...]) -> PeakResult:
    name, snap = max(phases.items(), key=lambda item: item[1].peak_bytes)
    extra = []
    if "decode" in phases and name != "decode":
        kv = phases["decode"].components.get(Component.KV_CACHE.value, 0)
        extra.append(f"KV cache for the whole context, at the last decode step: {kv:,} bytes ({phases['decode'].peak_bytes:,} bytes live then)")
    return PeakResult(snap.peak_bytes, snap.components, "simulated", (*notes, *extra, f"peak in phase: {name}"))


def _run(
    model: nn.Module, mode: Mode, device: Device, batch_size: int, seq_len: int,
    image_size: int | None, max_new_tokens: int,
) -> tuple[Phases, tuple[str, ...]]:
    """One full simulation: the peak of each phase of the step, and notes; raises where the
    model's code fails. The step's peak is the largest phase peak."""
    fake_mode = FakeTensorMode(static_shapes=True)
    try:
        workload = workload_for(model, batch_size=batch_size, seq_len=seq_len, image_size=image_size)
        materialize(model, fake_mode)
        with _target_device(model, device):
            if mode == "training":
                phases, notes = _simulate_training(model, workload, fake_mode, device)
            else:
                phases, notes = _simulate_inference(model, workload, fake_mode, max_new_tokens, device)
        return phases, notes + _uncounted(model, mode, device)
    finally:
        FakeTensorMode.cache_clear()  # the dispatch cache is process-wide and unbounded
        gc.collect()


@contextlib.contextmanager
def _target_device(model: nn.Module, device: Device) -> Iterator[None]:
    if device == "cuda":
        from estimator.peak.cuda_sdpa import cuda_sdpa

        with cuda_sdpa():
            yield
    else:
        yield


def _uncounted(model: nn.Module, mode: Mode, device: Device) -> tuple[str, ...]:
    """Notes on memory the simulation does not count (see docs/peak.md)."""
    notes = []
    has_conv = any(isinstance(m, nn.modules.conv._ConvNd) for m in model.modules())
    if device == "cuda":
        notes.append("not in peak_bytes: allocator rounding, CUDA context, cuBLAS/cuDNN workspaces")
    elif has_conv and mode == "training":
        notes.append("not counted: oneDNN workspaces inside CPU convolution backward")
    return tuple(notes)


def _workspace_model(device: Device) -> WorkspaceModel | None:
    return cpu_workspace if device == "cpu" else None


def _unique_tensors(tensors: Any) -> list[torch.Tensor]:
    return list({id(t): t for t in tensors}.values())


def _register_model(tracker: StorageTracker, model: nn.Module) -> None:
    for t in _unique_tensors(list(model.parameters()) + list(model.buffers())):
        tracker.register(t, Component.WEIGHTS)


def _register_inputs(tracker: StorageTracker, inputs: dict[str, torch.Tensor]) -> None:
    for t in inputs.values():
        tracker.register(t, Component.INPUTS)


def _simulate_training(
    model: nn.Module, workload: Workload, fake_mode: FakeTensorMode, device: Device
) -> tuple[Phases, tuple[str, ...]]:
    model.train()
    params = [p for p in _unique_tensors(model.parameters()) if p.requires_grad]
    tracker = StorageTracker(_workspace_model(device))
    notes = [f"training: 2 steps of forward + loss + backward + AdamW, peak of step 2 ({workload.description})"]
    # CPU tensors default to the for-loop AdamW; CUDA tensors to the multi-tensor (foreach) one.
    optimizer = torch.optim.AdamW(params, lr=1e-4, foreach=(device == "cuda"))
    with fake_mode, tracker:
        _register_model(tracker, model)
        tracker.new_component = Component.INPUTS
        inputs = workload.make_inputs()
        # Step 1 only leaves the optimizer states behind (its activations and gradients are freed
        # by the time step 2 starts), so it is run as gradients + ``optimizer.step()``: the states
        # are created by AdamW's own lazy initialisation, without a first forward and backward.
        tracker.new_component = Component.GRADIENTS
        for p in params:
            p.grad = torch.zeros_like(p)
        tracker.new_component = Component.TEMPORARIES
        optimizer.step()
        tracker.relabel(_state_tensors(optimizer), Component.OPTIMIZER_STATES)
        optimizer.zero_grad(set_to_none=True)
        # Step 2, tracked from here.
        tracker.reset_peak()
        tracker.new_component = Component.ACTIVATIONS
        loss = workload.train_loss(model, inputs)
        tracker.new_component = Component.TEMPORARIES
        loss.backward()
        del loss
        tracker.relabel((p.grad for p in params if p.grad is not None), Component.GRADIENTS)
        phases = {"forward_backward": tracker.snapshot()}
        tracker.reset_peak()
        optimizer.step()
        tracker.relabel(_state_tensors(optimizer), Component.OPTIMIZER_STATES)
        phases["optimizer_step"] = tracker.snapshot()
        optimizer.zero_grad(set_to_none=True)
        del inputs
    return phases, tuple(notes)


def _state_tensors(optimizer: torch.optim.Optimizer) -> Iterator[torch.Tensor]:
    for state in optimizer.state.values():
        for v in state.values():
            if isinstance(v, torch.Tensor):
                yield v


def _tensors_in(obj: Any, depth: int = 4) -> Iterator[torch.Tensor]:
    """Tensors reachable from a cache object (its layers' keys and values)."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif depth == 0 or obj is None or isinstance(obj, (int, float, str, bool)):
        return
    elif isinstance(obj, (list, tuple)):
        for item in obj:
            yield from _tensors_in(item, depth - 1)
    elif isinstance(obj, dict):
        for item in obj.values():
            yield from _tensors_in(item, depth - 1)
    elif hasattr(obj, "__dict__"):
        for item in vars(obj).values():
            yield from _tensors_in(item, depth - 1)


def _simulate_inference(
    model: nn.Module, workload: Workload, fake_mode: FakeTensorMode, max_new_tokens: int,
    device: Device,
) -> tuple[Phases, tuple[str, ...]]:
    model.eval()
    tracker = StorageTracker(_workspace_model(device))
    notes: list[str] = []
    generative = workload.kind in (ModelKind.CAUSAL_LM, ModelKind.SEQ2SEQ_LM)
    with fake_mode, torch.no_grad():
        with tracker:
            _register_model(tracker, model)
            tracker.new_component = Component.INPUTS
            inputs = workload.make_inputs()
            tracker.new_component = Component.ACTIVATIONS
            out = workload.infer(model, inputs)
            cache = getattr(out, "past_key_values", None)
            tracker.relabel(_tensors_in(cache), Component.KV_CACHE)
            phases = {"prefill" if generative else "forward": tracker.snapshot()}
        if generative:
            notes.append(f"inference: generate's prefill ({workload.description}), KV cache on")
        else:
            notes.append(f"inference: one forward under no_grad ({workload.description})")
        if max_new_tokens > 0 and workload.kind is ModelKind.CAUSAL_LM:
            del out, cache
            decode = _last_decode_step(model, inputs, tracker, max_new_tokens)
            notes.append(f"last decode step at context {inputs['input_ids'].shape[1] + max_new_tokens}")
            phases["decode"] = decode
        elif max_new_tokens > 0 and workload.kind is ModelKind.SEQ2SEQ_LM:
            notes.append("max_new_tokens: decoder cache growth of encoder-decoder models not simulated")
    return phases, tuple(notes)


def _last_decode_step(
    model: nn.Module, inputs: dict[str, torch.Tensor], tracker: StorageTracker, max_new_tokens: int
) -> PeakSnapshot:
    """The last token ``generate`` decodes: the cache already holds the prompt and all tokens
    generated but the last. The cache is filled by an untracked prefill; only the step is tracked."""
    from estimator.peak.inputs import _prefill_kwargs

    ids = inputs["input_ids"]
    b, n = ids.shape
    context = n + max_new_tokens - 1
    kwargs = _prefill_kwargs(model)
    out = model(input_ids=torch.zeros(b, context, dtype=ids.dtype), **kwargs)  # untracked
    cache = out.past_key_values
    del out
    with tracker:
        tracker.reset_peak()
        tracker.relabel(_tensors_in(cache), Component.KV_CACHE)
        tracker.new_component = Component.ACTIVATIONS
        step = model(
            input_ids=torch.zeros(b, 1, dtype=ids.dtype),
            past_key_values=cache,
            use_cache=True,
            **({"logits_to_keep": 1} if "logits_to_keep" in kwargs else {}),
        )
        tracker.relabel(_tensors_in(step.past_key_values), Component.KV_CACHE)
        snap = tracker.snapshot()
    return snap
