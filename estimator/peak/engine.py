"""The public entry of the peak-memory simulator for Hub models: ``simulate_peak``.

The simulation itself is the project's one engine, :func:`~estimator.peak.sim.steps.simulate_step`
(re-exported here), which :func:`~estimator.modules.estimate.estimate_module` calls too. This
module adds what is particular to Hub models: the workload a real run of the model's kind would
do (:func:`~estimator.peak.inputs.providers.workload_for`), layer extrapolation for decoders with many
alike layers (:mod:`estimator.peak.sim.layers`), and the formula fallback where the model's code
cannot run on fake tensors.

The model's own forward (and, for training, backward and ``torch.optim.AdamW`` step) runs on fake
tensors under :class:`~estimator.peak.sim.tracker.StorageTracker`; the result is the peak of live
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
for-loop AdamW that CPU tensors default to, the oneDNN and BLAS buffers of
:mod:`estimator.peak.kernels.cpu.workspace`). ``device="cuda"`` runs on the same CPU fakes but reproduces
CUDA's choices: ``foreach`` AdamW, and SDPA modelled as the flash / memory-efficient kernels (see
:mod:`estimator.peak.kernels.cuda.sdpa`).
"""

from __future__ import annotations

import contextlib
import copy
import gc
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

from estimator.build.rejections import missing_field
from estimator.errors import MalformedConfigError
from estimator.options import Component
from estimator.peak.inputs import routing
from estimator.peak.inputs.prompts.processors import Media
from estimator.peak.inputs.providers import workload_for
from estimator.peak.inputs.registry import Modality, media_makers
from estimator.peak.kernels.cuda.allocator import AllocatorPeaks
from estimator.peak.sim.batchnorm import batch_one_refusal
from estimator.peak.sim.formula import formula_components
from estimator.peak.sim.layer_trace import Periodicity
from estimator.peak.sim.layers import extrapolated
from estimator.peak.sim.library_logs import install as keep_library_logs_as_text
from estimator.peak.sim.materialize import materialize
from estimator.peak.sim.steps import AFTER, StepPeak, simulate_step
from estimator.peak.sim.tracker import PeakSnapshot, StorageTracker
from estimator.peak.sim.training import LoraTargetsError, Recipe, prepare
from estimator.peak.workload import StepRefusedError, Workload

__all__ = ["PeakResult", "Recipe", "StepPeak", "simulate_peak", "simulate_step"]

logger = logging.getLogger(__name__)
keep_library_logs_as_text()  # a kept log record must not hold a simulation's frames (estimator.peak.sim.library_logs)

Mode = Literal["inference", "training"]
Device = Literal["cpu", "cuda"]
Method = Literal["simulated", "formula"]
Phases = dict[str, PeakSnapshot]  # phase of the step -> its peak and breakdown
# a simulated model -> the hook entered around its step with the step's tracker (simulate_step's on_tracker)
Observe = Callable[[nn.Module], Callable[[StorageTracker], contextlib.AbstractContextManager[Any]]]


@dataclass(frozen=True)
class PeakResult:
    """Peak of live tensor bytes and what held it at that instant.

    ``components`` uses the keys of :class:`~estimator.options.Component` (only those
    that are non-zero) and always sums exactly to ``peak_bytes``.
    """

    peak_bytes: int
    components: dict[str, int]
    method: Method
    notes: tuple[str, ...] = field(default=())
    # training: the peak of a hand-written loop that keeps the model's outputs alive through
    # backward() and the optimizer step (the simulated loop, Trainer's, keeps only the loss)
    outputs_kept_bytes: int | None = None
    # device="cuda": what PyTorch's caching allocator adds on top (estimator.peak.kernels.cuda.allocator):
    # allocator_rounding (allocated peak after rounding - peak_bytes) and reserved_extra (reserved
    # peak - allocated peak); never inside peak_bytes
    allocator_overhead: dict[str, int] | None = None

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
    recipe: Recipe | None = None,
    media: Media | None = None,
    observe: Observe | None = None,
    allocator: bool = False,
    periodicity: Periodicity | None = None,
) -> PeakResult:
    """Simulate the peak memory of one inference or training step of ``model``.

    ``model`` must be built on the meta device in the dtype of the row (transformers:
    ``cls._from_config(config, dtype=...)`` under ``torch.device("meta")``; timm:
    ``timm.create_model(name, pretrained=False)`` under ``torch.device("meta")``). It is
    consumed: its tensors are replaced by fake tensors. ``seq_len`` is used by text models,
    ``image_size`` (default: from the config / pretrained config) by vision models. Where the
    model's code cannot run on fake tensors the result falls back to
    :func:`~estimator.peak.sim.formula.formula_components` with ``method="formula"`` and a note.
    With ``extrapolate_layers`` (default), a decoder with many alike layers is simulated with 2,
    3 and 4 layers and extrapolated when those are exactly linear (:mod:`estimator.peak.sim.layers`);
    otherwise the full model is simulated. The caching allocator's figures (``allocator_overhead``,
    ``device="cuda"``) are not linear in the layers (segment packing makes them jump; a line through
    2, 3 and 4 layers was off by up to 5x on Llama-3.1-8B): a full simulation gives them, and with
    ``allocator`` (the fit stage, a GPU chosen) so do the layer samples, the allocator replayed over the
    whole model's allocations written from theirs where those are exactly periodic in the layers
    (:mod:`estimator.peak.sim.layer_trace`; else the whole model is simulated). ``recipe`` (training only) says how the step is run
    (optimizer, mixed precision, gradient checkpointing, LoRA, QLoRA; :mod:`estimator.peak.sim.training`);
    by default a full float32-style step with AdamW in the model's dtype. ``media`` (vision-language
    and speech models): the images or audio in each prompt, made by the model's own processor
    (:mod:`estimator.peak.inputs.prompts.processors`); ``seq_len`` is then the text tokens beside them. Where the step
    with them cannot be simulated, the text-only step is, with a note (never a formula in its place).
    ``observe(model)``, when given, is called with each model simulated (a layer sample, or the whole model)
    and returns the ``on_tracker`` hook of its step (:func:`~estimator.peak.sim.steps.simulate_step`): the per-op
    cost counter of :mod:`estimator.speed.trace` follows the same pass so. ``periodicity`` (with ``allocator``; the
    row's simulation and the fit search's of one row): the first simulation given it keeps what its three layer
    samples proved, and later ones at other shapes (without ``observe``) run the 3-layer sample where the proof writes it
    exactly (:func:`~estimator.peak.sim.layer_trace.whole_trace_from_one`; the answer then holds the peak's phase
    only, its breakdown from the written trace), else the 4-layer one too where it writes both
    (:func:`~estimator.peak.sim.layer_trace.whole_trace_from`), else three.
    """
    kwargs: dict[str, Any] = dict(mode=mode, device=device, batch_size=batch_size, seq_len=seq_len, image_size=image_size,
                                  max_new_tokens=max_new_tokens, extrapolate_layers=extrapolate_layers, recipe=recipe,
                                  observe=observe, allocator=allocator, periodicity=periodicity)
    if media is None:
        return _simulate(model, **kwargs, media=None)
    spare = copy.deepcopy(model)  # a meta model: the retry's, as a run consumes the model it is given
    result = _simulate(model, **kwargs, media=media)
    if result.method == "simulated":
        return result
    text = _simulate(spare, **{**kwargs, "periodicity": None}, media=None)  # another step: not the proof's
    failed = next((n for n in result.notes if n.startswith("simulation failed")), "simulation failed").split("; formula used")[0]
    return replace(text, notes=(f"images or audio not simulated ({failed}); the step was simulated with text inputs only",
                                *text.notes))


def _simulate(model: nn.Module, *, mode: Mode, device: Device, batch_size: int, seq_len: int, image_size: int | None,
              max_new_tokens: int, extrapolate_layers: bool, recipe: Recipe | None, media: Media | None,
              observe: Observe | None = None, allocator: bool = False, periodicity: Periodicity | None = None) -> PeakResult:
    """:func:`simulate_peak` with or without ``media``, no fallback between them."""
    recipe = recipe or Recipe()
    counted = (_trainable_note(model, recipe),) if mode == "training" else ()
    if mode not in ("inference", "training"):
        raise ValueError(f"mode must be 'inference' or 'training', not {mode!r}")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', not {device!r}")
    if min(batch_size, seq_len) < 1 or max_new_tokens < 0:
        raise ValueError("batch_size and seq_len must be >= 1 and max_new_tokens >= 0")
    replayed = allocator and device == "cuda"
    found = extrapolated(model, lambda m: run_simulation(m, mode, device, batch_size, seq_len, image_size, max_new_tokens, recipe, media,
                                                           observe), allocator=replayed,
                         # the cost counter follows three samples: a proof is made there, not used
                         periodicity=None if observe is not None and periodicity is not None and periodicity.proofs
                         else periodicity) \
        if extrapolate_layers else None
    if found is not None:
        phases, notes, note, peaks = found
        if device == "cuda" and peaks is None:
            note += ("; the caching allocator's rounding and cached blocks are replayed over a whole model only "
                     "(they are not linear in the layers): not in runtime_overhead here, they are when a GPU is named")
        overhead = None if peaks is None else allocator_overhead(StepPeak(phases, notes).peak.peak_bytes, peaks)
        return _result(phases, (*notes, *counted, note), overhead)
    try:
        phases, notes, overhead, *_ = run_simulation(model, mode, device, batch_size, seq_len, image_size, max_new_tokens, recipe,
                                                     media, observe)
        return _result(phases, (*notes, *counted), overhead)
    except LoraTargetsError:
        raise
    except Exception as exc:  # the model's code could not run on fake tensors
        _refuse_config(exc, model, mode)
        logger.warning("simulation failed for %s: %s", type(model).__name__, exc, exc_info=True)
        comps = formula_components(model, mode, recipe.optimizer)
        note = (
            f"simulation failed ({type(exc).__name__}: {exc}); formula used: weights"
            + (f" + gradients + {recipe.optimizer} states of every parameter" if mode == "training" else "")
            + ", activations and temporaries not counted"
        )
        return PeakResult(sum(comps.values()), comps, "formula", (note,))


def _refuse_config(exc: Exception, model: nn.Module, mode: Mode) -> None:
    """A step that failed on the config, not on fake tensors (a field the modeling code reads is
    missing) is refused with that field named, as the real run would fail."""

    line = missing_field(exc, model, "training step" if mode == "training" else "forward")
    if line is not None:
        raise MalformedConfigError(line) from None
    refused = batch_one_refusal(exc, model)  # BatchNorm at batch 1 in training: the real run fails too
    if refused is not None:
        raise refused from None
    if isinstance(exc, StepRefusedError):  # a step the library cannot run (SAM2's video tracker trained) or its inputs cannot decide
        raise exc from None


_LORA_COUNTS: dict[tuple[str, str, int, tuple[str, ...] | None], int] = {}  # the fit solver asks again per shape


def _trainable_note(model: nn.Module, recipe: Recipe) -> str:
    """How many parameters the step trains, counted on the whole model (LoRA: peft's adapters on a
    copy, once per model config, rank and targets)."""

    if recipe.lora_rank is None:
        count = sum({id(p): p.numel() for p in model.parameters() if p.requires_grad}.values())
        return f"{count:,} trainable parameters"
    to_json = getattr(getattr(model, "config", None), "to_json_string", None)
    key = None if to_json is None else (type(model).__qualname__, to_json(use_diff=False), recipe.lora_rank, recipe.lora_targets)
    if key is None or key not in _LORA_COUNTS:
        adapted = prepare(copy.deepcopy(model), Recipe(lora_rank=recipe.lora_rank, lora_targets=recipe.lora_targets))
        count = sum({id(p): p.numel() for p in adapted.parameters() if p.requires_grad}.values())
        if key is None:
            return f"{count:,} trainable parameters"
        if len(_LORA_COUNTS) >= 64:
            _LORA_COUNTS.pop(next(iter(_LORA_COUNTS)))
        _LORA_COUNTS[key] = count
    return f"{_LORA_COUNTS[key]:,} trainable parameters"


def _result(phases: Phases, notes: tuple[str, ...], overhead: dict[str, int] | None = None) -> PeakResult:
    step = StepPeak(phases, notes)
    name, snap = step.phase, step.peak
    extra = []
    kept = step.outputs_kept
    if kept is not None:
        extra.append(outputs_kept_note("transformers' Trainer", kept.peak_bytes, snap.peak_bytes))
    if "decode" in phases:
        extra.append(_decode_cache_note(phases, name))
    return PeakResult(snap.peak_bytes, snap.components, "simulated", (*notes, *extra, f"peak in phase: {name}"),
                      outputs_kept_bytes=None if kept is None else kept.peak_bytes,
                      allocator_overhead=overhead)


def outputs_kept_note(loop: str, kept_bytes: int, peak_bytes: int) -> str:
    """The note beside a training peak: which loop was simulated, and the peak of a hand-written loop
    that keeps the model's outputs alive through backward() and the optimizer step."""
    more = kept_bytes - peak_bytes
    if not more:
        return (f"simulated loop: {loop} (only the loss outlives the forward); keeping `outputs` alive through "
                "backward() and the optimizer step does not change this peak")
    return (f"simulated loop: {loop} (only the loss outlives the forward); a hand-written loop that keeps "
            f"`outputs` alive through backward() and the optimizer step peaks at {kept_bytes:,} bytes "
            f"({more:+,} bytes, {more / peak_bytes:+.1%}; the row's outputs_kept_bytes)")


def _decode_cache_note(phases: Phases, name: str) -> str:
    """The cache as the last decode step leaves it, and at that step's peak instant, where
    ``DynamicLayer.update``'s ``torch.cat`` still holds one layer's old keys or values (the context
    less one token) beside the new ones until it replaces them."""
    at_peak = phases["decode"].components.get(Component.KV_CACHE.value, 0)
    after = phases.get(AFTER + "decode")
    held = at_peak if after is None else after.components.get(Component.KV_CACHE.value, 0)
    note = f"KV cache for the whole context, at the last decode step: {held:,} bytes"
    if held != at_peak:
        note += (f"; at that step's peak {at_peak:,} bytes are cache ({at_peak - held:+,}: torch.cat in the cache's "
                 "update holds a layer's old keys or values until the new ones replace them)")
    if name != "decode":
        note += f" ({phases['decode'].peak_bytes:,} bytes live at that step's peak)"
    if after is not None:  # SSM / linear-attention layers: a fixed state per sequence, whatever the context
        states = [f"{c.value} {after.components[c.value]:,} bytes" for c in (Component.CONV_STATE, Component.SSM_STATE)
                  if after.components.get(c.value)]
        if states:
            note += "; SSM / linear-attention layers' state (fixed per sequence): " + ", ".join(states)
    return note


def run_simulation(
    model: nn.Module, mode: Mode, device: Device, batch_size: int, seq_len: int,
    image_size: int | None, max_new_tokens: int, recipe: Recipe, media: Media | None = None,
    observe: Observe | None = None,
) -> tuple[Phases, tuple[str, ...], dict[str, int] | None, list[tuple[int, int]] | None, list[str] | None]:
    """One full simulation by the engine (:func:`~estimator.peak.sim.steps.simulate_step`): the peak
    of each phase of the step, notes, the CUDA allocator's overheads, the allocation trace it was
    replayed over and what each of its records holds (both ``None`` on cpu); raises where the model's code fails."""
    fake_mode = FakeTensorMode(static_shapes=True)
    try:
        workload, unfed = pick_workload(model, media, batch_size, seq_len, image_size)
        notes: tuple[str, ...] = ()
        if recipe.kbit:  # a bitsandbytes int8 / int4 model (estimator.peak.sim.quantized; QLoRA: estimator.peak.sim.qlora)
            from estimator.peak.sim.quantized import quantize_for

            model = quantize_for(model, recipe.kbit_bits, mode)
        if recipe.prequantized is not None:  # a pre-quantized checkpoint's layers (estimator.peak.sim.prequant)
            from estimator.peak.sim import prequant

            model = prequant.quantize_on_meta(model, prequant.loads(recipe.prequantized), device=device)
        if mode == "training":
            model = prepare(model, recipe)
            notes = (f"training recipe: {recipe.describe()}",)
        materialize(model, fake_mode)
        if recipe.kbit:
            from estimator.peak.sim.quantized import pack_for

            notes += pack_for(model, fake_mode, recipe.kbit_bits, mode, device)
        if recipe.prequantized is not None:
            notes += prequant.pack(model, fake_mode, prequant.loads(recipe.prequantized), device=device)
        # A vision-language model leaves some vision parameters without gradients (LLaVA's last vision layer,
        # under vision_feature_layer=-2): its first step is run in full, so that the optimizer keeps no state for them.
        step = simulate_step(model, workload, fake_mode, mode=mode, device=device, max_new_tokens=max_new_tokens,
                             optimizer=recipe.optimizer, autocast_dtype=recipe.autocast_dtype if mode == "training" else None,
                             full_first_step=media is not None or workload.full_first_step,
                             on_tracker=None if observe is None else observe(model))
        overhead = None if step.allocator is None else allocator_overhead(step.peak.peak_bytes, step.allocator)
        return step.phases, step.notes + notes + unfed + _uncounted(model, mode, device), overhead, step.events, step.labels
    finally:
        bound_dispatch_cache()
        collect_garbage()


def pick_workload(model: nn.Module, media: Media | None, batch_size: int, seq_len: int,
              image_size: int | None) -> tuple[Workload, tuple[str, ...]]:
    """The media workload where ``media`` is given and the model's processor can make its inputs; else
    the text (or vision) workload, with a note saying why the images or audio were left out."""
    if media is not None:
        speech = media.images == 0 and not media.video_frames  # speech models: no images or video, audio
        made, run = media_makers(Modality.AUDIO if speech else Modality.IMAGES)  # speech encoders: one forward
        try:
            # the known constants (and routing assumption) the text workload gets (estimator.peak.inputs.routing): GLM-5-Next's
            # indexer splits the attention mask back out of its packed keys to build its pools
            return routing.assumed(model, run(model, made(model.config, media, batch_size=batch_size, text_len=seq_len))), ()
        except Exception as exc:  # the processor could not be built or run from this config
            logger.warning("processor inputs failed for %s: %s", type(model).__name__, exc, exc_info=True)
            why = (f"images or audio not simulated: the model's processor could not make its inputs from this config "
                   f"({type(exc).__name__}: {str(exc)[:200]}); the step was simulated with text inputs only",)
            return workload_for(model, batch_size=batch_size, seq_len=seq_len, image_size=image_size), why
    return workload_for(model, batch_size=batch_size, seq_len=seq_len, image_size=image_size), ()


# FakeTensorMode's dispatch cache (op and input metadata -> output metadata; no tensors) is process-wide and
# unbounded. Kept between simulations, the layer samples and the fit search's shapes of one answer run mostly
# from it (an 8B LoRA answer: ~5,300 hits, ~700 entries; the CPU time of a row's three samples fell by a third);
# emptied past this many entries.
DISPATCH_CACHE_ENTRIES = 20_000


def bound_dispatch_cache() -> None:
    """Empty FakeTensorMode's dispatch cache once it holds more than :data:`DISPATCH_CACHE_ENTRIES` entries."""
    if FakeTensorMode.cache_info().size > DISPATCH_CACHE_ENTRIES:
        FakeTensorMode.cache_clear()


_frozen_at: int | None = None  # len(sys.modules) at the last gc.freeze()


def collect_garbage() -> None:
    """Free the simulation's reference cycles now. A full collection walks every object of the
    process (transformers' and torch's modules: most of a second), so after the first one what is
    left — the libraries — is moved out of the collector's sight (``gc.freeze``), and the next
    collections walk only what later simulations made (the fit solver runs dozens). Libraries imported
    later (peft on the first LoRA answer, a model family's modules: ~115,000 objects, 0.05 s a walk) are
    frozen the same way after the collection that follows their import: only when ``sys.modules`` grew, so
    the objects left out of later collections are what was alive then (a bounded set: at most once per
    import), never a simulation's garbage, which the collection just freed."""
    global _frozen_at
    gc.collect()
    if _frozen_at is None or len(sys.modules) > _frozen_at:
        gc.freeze()
        _frozen_at = len(sys.modules)


def allocator_overhead(live: int, peaks: AllocatorPeaks) -> dict[str, int]:
    """What the caching allocator adds to the step's peak of ``live`` bytes (see :class:`PeakResult`)."""
    allocated = max(peaks.allocated_peak, live)
    return {"allocator_rounding": allocated - live, "reserved_extra": max(0, peaks.reserved_peak - allocated)}


def _uncounted(model: nn.Module, mode: Mode, device: Device) -> tuple[str, ...]:
    """Notes on memory the simulation does not count (see docs/peak.md)."""
    if device == "cuda":
        return ("not in peak_bytes (see runtime_overhead): the caching allocator's rounding and cached blocks, the CUDA context, "
                "cuBLAS workspaces; cuDNN and fused-kernel workspaces are not modelled",)
    return ()
