"""Inputs of the models of :mod:`estimator.peak.inputs.other.workloads` that no feature extractor feeds: time series,
trajectories, a draft head, and text models whose real use needs one more step than the generic one.

``model_inputs(model, batch_size, seq_len)`` returns a :class:`Found` (arrays by forward argument name, a
description, and what a real run does besides feeding them) or None for a model it does not know:

- TimesFM: ``past_values`` (B, context_length), ``past_values_padding`` zeros (no padding) and ``freq``
  (B, 1) the high-frequency class 0, as ``TimesFmModelForPrediction`` makes them;
- Decision Transformer: a trajectory of ``seq_len`` steps: ``states`` (B, L, state_dim), ``actions``
  (B, L, act_dim), ``rewards`` and ``returns_to_go`` (B, L, 1), ``timesteps`` 0..L-1, ``attention_mask`` ones;
- MuseGlimmer's DFlash draft head: ``noise_embeds`` (B, block_size, hidden) and ``context_hidden_states``
  (B, L, hidden * len(target_layer_ids)), the target model's hidden states of ``seq_len`` accepted tokens;
- X-MOD (masked LM): ``input_ids``, labels and ``lang_ids`` (B,): the index of the default language's
  adapter (else the first configured language), as a user passes it (or sets ``set_default_language``);
- Reformer (masked LM): ``input_ids`` of the length its axial position embeddings factor
  (``prod(axial_pos_shape)``: training refuses any other), and labels;
- FastSpeech 2 and VITS (text to speech): see :mod:`estimator.peak.inputs.audio.tts`;
- Switch Transformers (seq2seq LM): ``input_ids`` and ``labels`` (training); inference as ``generate``
  runs it: the encoder first, then the decoder's first step on its outputs with a cache.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from torch import nn

from estimator.peak.inputs.generic import ordinary_token
from estimator.peak.sim.prefill import prefill_kwargs

__all__ = ["Found", "model_inputs"]


@dataclass(frozen=True)
class Found:
    """What to feed (numpy arrays by argument name) and how a real run calls the model with them."""

    arrays: dict[str, np.ndarray]
    description: str
    prepare: Callable[[nn.Module], None] | None = None  # done to the model before the forward (a language)
    infer_drops: tuple[str, ...] = ()  # arguments inference does not pass (training labels)
    infer: Callable[[nn.Module, dict[str, Any]], Any] | None = None  # inference other than one forward
    seq2seq: bool = False
    known_floats: tuple[str, ...] = ()  # float inputs whose values the model asks about (labels marking padding)
    train: Callable[[nn.Module, dict[str, Any]], Any] | None = None  # training's forward other than one over every input


def model_inputs(model: nn.Module, batch_size: int, seq_len: int) -> Found | None:
    """The inputs of a model this module knows, else None."""
    config: Any = model.config
    maker = _MAKERS.get(str(getattr(config, "model_type", "")))
    return maker(config, batch_size, seq_len) if maker is not None else None


def _timesfm(config: Any, b: int, n: int) -> Found:
    steps = int(config.context_length)
    arrays: dict[str, np.ndarray] = {"past_values": np.zeros((b, steps), np.float32), "past_values_padding": np.zeros((b, steps), np.int64),
              "freq": np.zeros((b, 1), np.int32)}
    return Found(arrays, f"past_values {b}x{steps} (context_length), past_values_padding zeros, freq {b}x1 class 0")


def _decision_transformer(config: Any, b: int, n: int) -> Found:
    n = min(n, int(config.max_ep_len))
    arrays: dict[str, np.ndarray] = {"states": np.zeros((b, n, int(config.state_dim)), np.float32), "actions": np.zeros((b, n, int(config.act_dim)), np.float32),
              "rewards": np.zeros((b, n, 1), np.float32), "returns_to_go": np.zeros((b, n, 1), np.float32),
              "timesteps": np.tile(np.arange(n, dtype=np.int64), (b, 1)), "attention_mask": np.ones((b, n), np.int64)}
    return Found(arrays, f"a trajectory of {n} steps: states {b}x{n}x{config.state_dim}, actions {b}x{n}x{config.act_dim}, "
                         "rewards, returns_to_go, timesteps, attention_mask")


def _draft_head(config: Any, b: int, n: int) -> Found:
    hidden, block = int(config.hidden_size), int(config.block_size)
    width = hidden * len(config.target_layer_ids)
    arrays = {"noise_embeds": np.zeros((b, block, hidden), np.float32), "context_hidden_states": np.zeros((b, n, width), np.float32)}
    return Found(arrays, f"noise_embeds {b}x{block}x{hidden} (block_size), context_hidden_states {b}x{n}x{width} "
                         f"(the target model's hidden states of {n} accepted tokens)")


def _masked_lm(config: Any, b: int, n: int) -> dict[str, np.ndarray]:

    vocab = int(config.vocab_size)
    ids = np.full((b, n), ordinary_token(config, vocab), np.int64)
    return {"input_ids": ids, "labels": ids.copy()}


def _xmod(config: Any, b: int, n: int) -> Found:
    languages = list(config.languages or [])
    language = config.default_language or (languages[0] if languages else None)
    arrays = _masked_lm(config, b, n)
    arrays["lang_ids"] = np.full((b,), languages.index(language) if language in languages else 0, np.int64)
    return Found(arrays, f"input_ids {b}x{n}, lang_ids {b} (adapter of {language}); training labels", infer_drops=("labels",))


def _reformer(config: Any, b: int, n: int) -> Found:
    shape = list(config.axial_pos_shape) if getattr(config, "axial_pos_embds", False) else None
    length = math.prod(int(s) for s in shape) if shape else n
    why = f" (prod(axial_pos_shape {tuple(shape)}): the length Reformer trains on)" if shape else ""
    return Found(_masked_lm(config, b, length), f"input_ids {b}x{length}{why}; training labels", infer_drops=("labels",))


def _seq2seq_generate(config: Any, b: int, n: int) -> Found:

    vocab = int(config.vocab_size)
    token = ordinary_token(config, vocab)
    arrays = {"input_ids": np.full((b, n), token, np.int64), "labels": np.full((b, n), token, np.int64)}
    start = config.decoder_start_token_id if config.decoder_start_token_id is not None else 0

    def infer(m: nn.Module, x: dict[str, Any]) -> Any:
        import torch

        encoder_outputs = m.get_encoder()(input_ids=x["input_ids"])  # type: ignore[operator]  # generate's first call
        decoder_ids = torch.full((x["input_ids"].shape[0], 1), int(start), dtype=torch.long)
        return m(encoder_outputs=encoder_outputs, decoder_input_ids=decoder_ids, **prefill_kwargs(m))

    return Found(arrays, f"input_ids {b}x{n}; training labels {b}x{n}; inference: the encoder, then generate's first decoder step",
                 infer=infer, seq2seq=True)


_MAKERS: dict[str, Callable[[Any, int, int], Found]] = {
    "timesfm": _timesfm,
    "decision_transformer": _decision_transformer,
    "muse_glimmer_assistant": _draft_head,
    "xmod": _xmod,
    "reformer": _reformer,
    "switch_transformers": _seq2seq_generate,
}
