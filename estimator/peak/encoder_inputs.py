"""Text encoders whose forward asks questions about its inputs that the generic token-id workload cannot answer.

- Longformer (masked LM and the other heads): ``input_ids`` and the tokenizer's ``attention_mask`` (ones,
  int64), training ``labels`` (the masked-LM head: the ids; a classifier: class 0). The model pads both to
  a multiple of ``attention_window`` itself (as the real run does: the padding and its (B, 1, W, W) mask are
  counted) and asks whether any token has global attention (``is_index_global_attn.any().item()``); the
  mask it asks about is built from the attention mask and constants (``torch.finfo`` bounds, ``where``),
  which :class:`~estimator.peak.routing.KnownConstants` keeps known, so the answer is the real one: none,
  as a masked-LM user sends no ``global_attention_mask``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
from torch import nn

from estimator.peak.basic_inputs import Workload

__all__ = ["workload"]


def workload(model: nn.Module, *, batch_size: int, seq_len: int, image_size: int | None) -> Workload | None:
    """The workload of an encoder this module knows (see the module docstring), else None."""
    config: Any = getattr(model, "config", None)
    if config is None or getattr(config, "model_type", None) != "longformer" or getattr(model, "main_input_name", "") != "input_ids":
        return None
    from estimator.peak.basic_inputs import ordinary_token
    from estimator.peak.other_inputs import _forward_all
    from estimator.peak.other_models import Found
    from estimator.peak.routing import with_ties

    b, n = batch_size, seq_len
    ids = np.full((b, n), ordinary_token(config, int(config.vocab_size)), np.int64)
    arrays: dict[str, np.ndarray] = {"input_ids": ids, "attention_mask": np.ones((b, n), np.int64)}
    name = type(model).__name__
    if name.endswith("ForMaskedLM"):
        arrays["labels"] = ids.copy()
    elif name.endswith(("ForSequenceClassification", "ForMultipleChoice")) or name.endswith("ForTokenClassification"):
        arrays["labels"] = np.zeros((b, n) if name.endswith("ForTokenClassification") else (b,), np.int64)
    window = config.attention_window if isinstance(config.attention_window, int) else max(config.attention_window)
    padded = -(-n // window) * window
    description = (f"input_ids {b}x{n}, attention_mask ones (the model pads both to {padded}, a multiple of its "
                   f"attention_window {window}; no global attention)" + ("; training labels" if "labels" in arrays else ""))
    found = _forward_all(model, arrays, description, Found(arrays, description, infer_drops=("labels",)))
    return replace(found, context=with_ties(found.context, ties=False))
