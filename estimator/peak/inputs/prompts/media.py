"""The workload of a vision-language or speech model fed its processor's inputs (:mod:`estimator.peak.inputs.prompts.processors`).

- inference: ``generate``'s prefill and, with ``max_new_tokens``, its last decode step with the image state
  ``generate`` keeps (:mod:`estimator.peak.inputs.prompts.generation`: the model's own ``prepare_inputs_for_generation`` and
  ``_update_model_kwargs_for_generation``; BLIP-2's and BLIP's own ``generate`` handing over to their language model).
- training: a forward with ``labels`` = the prompt's ids (text and image tokens; the model masks
  nothing by itself, as a plain fine-tuning collator would pass them) to the model's own loss.

The integer inputs (ids, grids, tile ids, masks) are fakes whose real values are known to
:class:`~estimator.peak.fakes.known_values.KnownValues`, entered around the whole step, so the model's
questions about where the image tokens are get the real answers.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from estimator.options import Component
from estimator.peak.fakes.index_lists import IndexLists
from estimator.peak.fakes.known_bounds import KnownBounds
from estimator.peak.fakes.known_values import KnownValues, know
from estimator.peak.inputs.prompts import generation
from estimator.peak.inputs.prompts.family import plain_inputs
from estimator.peak.inputs.prompts.processors import MediaInputs
from estimator.peak.sim.prefill import prefill_kwargs
from estimator.peak.sim.tracker import StorageTracker
from estimator.peak.workload import ModelKind, Workload, model_dtype

__all__ = ["ENCODERS", "MediaWorkload", "encoder_labelled", "media_workload"]

# The submodules of a vision-language or speech model that turn images or audio into features the
# language model reads: transformers' attribute names for the encoders and their projectors.
ENCODERS = frozenset({"vision_tower", "visual", "vision_model", "audio_tower", "multi_modal_projector", "connector",
                      "vision_embed_tokens", "audio_encoder", "encoder", "protein_encoder"})


def _encoders(model: nn.Module) -> list[nn.Module]:
    """The outermost submodules named in :data:`ENCODERS` (an encoder-decoder's ``encoder`` too)."""
    found: list[nn.Module] = []
    prefixes: list[str] = []
    for name, module in model.named_modules():
        if name.rsplit(".", 1)[-1] in ENCODERS and not any(name.startswith(p + ".") for p in prefixes):
            found.append(module)
            prefixes.append(name)
    return found


@contextlib.contextmanager
def encoder_labelled(model: nn.Module) -> Iterator[None]:
    """While the encoders run, what the tracker sees allocated is ``encoder_activations`` (the tracker
    is found on the dispatch mode stack: the step's own :class:`~estimator.peak.sim.tracker.StorageTracker`)."""
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    tracker = next((m for m in _get_current_dispatch_mode_stack() if isinstance(m, StorageTracker)), None)
    if tracker is None:
        yield
        return
    saved: list[Any] = []

    def enter(_m: nn.Module, _args: Any) -> None:
        saved.append(tracker.new_component)
        tracker.new_component = Component.ENCODER_ACTIVATIONS

    def leave(_m: nn.Module, _args: Any, _out: Any) -> None:
        tracker.new_component = saved.pop()

    handles = []
    for module in _encoders(model):
        handles.append(module.register_forward_pre_hook(enter))
        handles.append(module.register_forward_hook(leave))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


@dataclass(frozen=True)
class MediaWorkload(Workload):
    """A workload with a context the engine enters around the whole step, above the tracker."""

    context: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext
    # generate's last decode step keeping the image state (estimator.peak.inputs.prompts.generation.decode); None: text only
    decode: Callable[[nn.Module, dict[str, torch.Tensor], int, Callable[[Any], None]], Any] | None = None


def media_workload(model: nn.Module, media: MediaInputs) -> Workload:
    """The workload of ``model`` on ``media`` (one batch of processor outputs); see the module docstring."""
    dtype = model_dtype(model)
    config: Any = model.config
    seq2seq = bool(config.is_encoder_decoder)
    # an encoder-decoder whose config has no pad_token_id (Moonshine) cannot shift its labels into decoder
    # inputs itself: the training loop passes them, the labels after the decoder's start token
    shifted, description = _shifted_labels(config, media) if seq2seq else (None, media.description)

    plain = plain_inputs(model, media.plain)  # Python values, as they are (Unlimited-OCR's tile counts)

    def make_inputs() -> dict[str, torch.Tensor]:
        made: dict[str, Any] = {}
        for name, real in media.tensors.items():
            if real.dtype.is_floating_point:
                made[name] = torch.empty(real.shape, dtype=dtype if real.dtype == torch.float32 else real.dtype)
                # a per-sample float (Qwen2.5-VL's second_per_grid_ts, read by the rope index) is known as the ids are
                if media.known_pixels or real.dim() <= 1:
                    know(made[name], real)
            else:
                made[name] = know(torch.empty(real.shape, dtype=real.dtype), real)
        if "labels" not in made:  # a prompt's labels are its ids
            made["labels"] = know(torch.empty(media.tensors["input_ids"].shape, dtype=torch.long), media.tensors["input_ids"])
        if shifted is not None:
            made["decoder_input_ids"] = know(torch.empty(shifted.shape, dtype=torch.long), shifted)
        return {**made, **plain}

    def train_loss(m: nn.Module, x: dict[str, torch.Tensor]) -> torch.Tensor:
        with encoder_labelled(m):
            if not hasattr(m, "prepare_inputs_for_generation"):  # a base model: no loss of its own
                from estimator.peak.workload import first_tensor

                return first_tensor(m(**{k: v for k, v in x.items() if k != "labels"})).sum()
            return m(**x).loss

    def infer(m: nn.Module, x: dict[str, torch.Tensor]) -> Any:
        # generate starts the decoder from its start token (a captioner's training decoder_input_ids are the caption's)
        x = {k: v for k, v in x.items() if k not in ("labels", "decoder_input_ids", "audio_labels")}
        if seq2seq:  # generate's first step: the encoder on the audio, the decoder on its start token
            start = getattr(config, "decoder_start_token_id", None)
            first = next(iter(x.values()))
            decoder_ids = torch.full((first.shape[0], 1), 0 if start is None else int(start), dtype=torch.long)
            segment = getattr(m, "_get_input_segment", None)
            if segment is not None and "input_features" in x:  # Whisper's generate runs on a copy of its 30 s window
                b, frames = x["input_features"].shape[0], x["input_features"].shape[-1]
                x["input_features"] = segment(x["input_features"], [0] * b, [frames] * b, frames, b, list(range(b)))
            with encoder_labelled(m):
                return m(**x, decoder_input_ids=decoder_ids, **prefill_kwargs(m))
        if not hasattr(m, "prepare_inputs_for_generation"):  # a base model without its head: one forward
            with encoder_labelled(m):
                return m(**x)
        with encoder_labelled(m):  # the all-ones mask is known, as the ids are (generate's: no padding)
            return generation.prefill(m, x)

    def decode(m: nn.Module, x: dict[str, torch.Tensor], max_new_tokens: int, before_last: Callable[[Any], None]) -> Any:
        x = {k: v for k, v in x.items() if k not in ("labels", "decoder_input_ids", "audio_labels")}
        with encoder_labelled(m):
            return generation.decode(m, x, max_new_tokens, before_last)

    kind = ModelKind.SEQ2SEQ_LM if seq2seq else ModelKind.CAUSAL_LM
    return MediaWorkload(kind, make_inputs, train_loss, infer, description, context=_known,
                         decode=None if seq2seq else decode)


@contextlib.contextmanager
def _known() -> Iterator[None]:
    """The inputs' known values, indexes by sequences of 0-d tensors stacked (:mod:`estimator.peak.fakes.index_lists`), and
    equalities of bounded codes known (:mod:`estimator.peak.fakes.known_bounds`: GLM-Image's VQ codes in its ``input_ids``)."""

    with KnownValues(), IndexLists(), KnownBounds():
        yield


def _shifted_labels(config: Any, media: MediaInputs) -> tuple[torch.Tensor | None, str]:
    """The decoder inputs a training loop passes beside the labels where the model cannot make them (no
    ``pad_token_id`` to shift with), and the workload's words; None where the model shifts its own labels."""
    labels = media.tensors.get("labels")
    decoder = config.get_text_config(decoder=True)
    if labels is None or "decoder_input_ids" in media.tensors or getattr(decoder, "pad_token_id", 0) is not None \
            or getattr(config, "pad_token_id", 0) is not None:
        return None, media.description
    start = next((t for t in (getattr(config, "decoder_start_token_id", None), getattr(decoder, "bos_token_id", None))
                  if isinstance(t, int)), 0)
    shifted = torch.cat([torch.full_like(labels[:, :1], int(start)), labels[:, :-1]], dim=1)
    return shifted, (f"{media.description}; decoder_input_ids: the labels after the start token "
                     f"(the config has no pad_token_id to shift them with)")

