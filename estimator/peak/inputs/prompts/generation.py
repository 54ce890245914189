"""``generate`` on a prompt with images or audio, as transformers runs it: the prefill and the last decode step.

- **Prefill**: the model's own ``prepare_inputs_for_generation`` (first iteration: the images go in) on the
  prompt, a ``DynamicCache``, the all-ones mask and ``logits_to_keep=1``, then its forward. A model that takes
  its encoder's outputs (``mm_encoder_outputs``: Idefics3) first runs the encoder, as ``generate`` does.
- **Decode** (``--max-new-tokens``): the image state stays where ``generate`` keeps it. After the prefill the
  model's own ``_update_model_kwargs_for_generation`` carries what the model returned for later steps (Idefics'
  ``image_hidden_states``, Mllama's cross-attention mask, Qwen-VL's ``rope_deltas``), the tokens generated before the
  last one go through the model in one step (``next_sequence_length``: the cache holds the context but the last
  token, as after that many single steps), then the last step is the one measured: ``prepare_inputs_for_generation``
  slices the last token and keeps the image state, and the forward runs on the whole cache.
- **Hand-over** (:data:`HANDOVER`): BLIP-2, InstructBLIP(-Video), BLIP and Kosmos-2 have their own ``generate``,
  which runs the vision encoder (and Q-Former) and hands the prompt's embeddings to its language model's
  ``generate``. That ``generate`` is the model's own, run as is; only the language model's ``generate`` it calls is
  replaced by the steps above, so what the outer ``generate`` keeps alive (image embeddings, the Q-Former's
  output) is live during the language model's prefill and decode, as in the real run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from estimator.peak.sim.prefill import prefill_kwargs

__all__ = ["HANDOVER", "decode", "prefill"]

# model_type -> the submodule whose ``generate`` the model's own ``generate`` hands the prompt to
HANDOVER = {"blip-2": "language_model", "instructblip": "language_model", "instructblipvideo": "language_model",
            "blip": "text_decoder", "kosmos-2": "text_model"}

BeforeLast = Callable[[Any], None]  # called with the cache just before the last decode step (the measured window)


def prefill(m: nn.Module, x: dict[str, torch.Tensor], *, ones_mask: bool = True) -> Any:
    """``generate``'s first forward on the processor's inputs ``x`` (see the module docstring). ``ones_mask=False``:
    no ``attention_mask``, as transformers 5's ``generate`` drops an all-ones one of a decoder-only model (Evolla's
    adapters read the mask as the query's: its length must be the step's)."""
    return _run(m, x, lambda lm, ids, kwargs: _first(lm, ids, kwargs)[0], ones_mask)


def decode(m: nn.Module, x: dict[str, torch.Tensor], max_new_tokens: int, before_last: BeforeLast, *, ones_mask: bool = True) -> Any:
    """``generate``'s last decode step after ``max_new_tokens - 1`` generated tokens; returns its output.
    ``before_last(cache)`` is called when only the last step is left (the caller starts its window there);
    ``ones_mask`` as in :func:`prefill`."""

    def steps(lm: nn.Module, ids: torch.Tensor, kwargs: dict[str, Any]) -> Any:
        out, kwargs = _first(lm, ids, kwargs)
        b = ids.shape[0]
        extra = max_new_tokens - 1
        if extra > 0:  # the tokens generated before the last, in one step over the cache
            kwargs = lm._update_model_kwargs_for_generation(out, kwargs, False, num_new_tokens=extra)  # type: ignore[operator]
            del out
            ids = torch.cat([ids, torch.zeros(b, extra, dtype=ids.dtype)], dim=1)
            prepared = lm.prepare_inputs_for_generation(ids, next_sequence_length=extra, **kwargs)  # type: ignore[operator]
            out = lm(**prepared)
            del prepared
        kwargs = lm._update_model_kwargs_for_generation(out, kwargs, False, num_new_tokens=1)  # type: ignore[operator]
        del out
        ids = torch.cat([ids, torch.zeros(b, 1, dtype=ids.dtype)], dim=1)
        before_last(next((kwargs[k] for k in ("past_key_values", "cache_params") if kwargs.get(k) is not None), None))
        prepared = lm.prepare_inputs_for_generation(ids, next_sequence_length=1, **kwargs)  # type: ignore[operator]
        return lm(**prepared)

    return _run(m, x, steps, ones_mask)


def _first(m: nn.Module, ids: torch.Tensor, kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The prefill of ``m`` on ``ids``; returns its output and the kwargs ``generate`` keeps."""
    encode = getattr(m, "_maybe_prepare_encoder_kwargs_for_generation", None)
    config: Any = m.config
    if encode is not None and not config.is_encoder_decoder:
        kwargs = encode(ids, kwargs, "input_ids", m.generation_config)
    prepared = m.prepare_inputs_for_generation(ids, is_first_iteration=True, **kwargs)  # type: ignore[operator]
    return m(**prepared), kwargs


def _run(m: nn.Module, x: dict[str, torch.Tensor], steps: Callable[[nn.Module, torch.Tensor, dict[str, Any]], Any],
         ones_mask: bool = True) -> Any:
    """``steps(language model, prompt ids, generate's kwargs)``: on ``m`` itself, or where ``m`` hands over
    (:data:`HANDOVER`), inside ``m``'s own ``generate`` on the submodule it hands the prompt to."""
    name = HANDOVER.get(str(getattr(m.config, "model_type", "")))
    inner = getattr(m, name, None) if name else None
    if inner is None:
        x = dict(x)
        ids = x.pop("input_ids")
        x.pop("attention_mask", None)
        return steps(m, ids, {**prefill_kwargs(m), **x, **({"attention_mask": torch.ones_like(ids)} if ones_mask else {})})
    found: list[Any] = []

    def handed(*args: Any, **kwargs: Any) -> Any:
        given = {k: v for k, v in kwargs.items() if isinstance(v, torch.Tensor)}  # not generate's own options (eos ids)
        ids = given.pop("input_ids", args[0] if args else None)
        if ids is None:
            from estimator.errors import UnsupportedError

            raise UnsupportedError(f"{type(m).__name__} hands its language model embeddings without token ids "
                                   "(an encoder-decoder language model): not simulated")
        if "attention_mask" not in given:
            given["attention_mask"] = torch.ones_like(ids)
        found.append(steps(inner, ids, {**prefill_kwargs(inner), **given}))
        return None

    inner.generate = handed
    try:
        m.generate(**x)  # type: ignore[operator]
    finally:
        del inner.generate
    return found[0]
