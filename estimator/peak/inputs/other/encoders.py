"""Text encoders whose forward asks questions about its inputs that the generic token-id workload cannot answer.

- Longformer (masked LM and the other heads): ``input_ids`` and the tokenizer's ``attention_mask`` (ones,
  int64), training ``labels`` (the masked-LM head: the ids; a classifier: class 0). The model pads both to
  a multiple of ``attention_window`` itself (as the real run does: the padding and its (B, 1, W, W) mask are
  counted) and asks whether any token has global attention (``is_index_global_attn.any().item()``); the
  mask it asks about is built from the attention mask and constants (``torch.finfo`` bounds, ``where``),
  which :class:`~estimator.peak.inputs.routing.KnownConstants` keeps known, so the answer is the real one: none,
  as a masked-LM user sends no ``global_attention_mask``.
- I-BERT: the generic token-id workload; in training each ``QuantAct`` records its activations' range and
  asks about it: that no value is NaN (known all false: a run that has not diverged,
  :class:`~estimator.peak.fakes.known_constants.KnownConstants` with ``finite``), and whether its recorded range
  is still the initial one (its ``x_min`` / ``x_max`` buffers: known as the values its ``__init__`` gives,
  read from a CPU ``QuantAct`` built with the module's settings), then keeps a running average. The range
  of an activation (its ``min()`` / ``max()``, :data:`IBERT_RANGE`) is assumed: any range wider than the
  initial +-1e-5 takes the same branches, and every branch keeps a 1-element range, so what is allocated
  does not depend on it.
- GLM-Image's VQ-VAE alone (``glm_image_vqmodel``): it has no ``forward``; GLM-Image calls its ``encode`` on
  the vision tower's features of each image, (1, latent_channels, h, w) with h = w = the image side over
  the tower's patch size (GlmImageVisionConfig's default, 16 px), to turn them into codebook tokens. Fed the
  features of one ``image_size`` image (default :data:`VQ_IMAGE_SIDE` px); inference is ``encode`` under
  ``no_grad``, training backpropagates its ``embedding_loss`` (the codebook and commitment loss, what
  training a VQ codebook minimises; GLM-Image itself keeps the VQ model frozen).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

from estimator.peak.fakes.known_constants import KnownConstants
from estimator.peak.fakes.known_values import KnownValues, know, known_value
from estimator.peak.inputs.generic import generic_workload, ordinary_token
from estimator.peak.inputs.other.models import Found
from estimator.peak.inputs.other.workloads import arrays_workload
from estimator.peak.inputs.routing import with_ties
from estimator.peak.workload import ModelKind, Workload, model_dtype

__all__ = ["IBERT_RANGE", "VQ_IMAGE_SIDE", "workload"]

IBERT_RANGE = (-1.0, 1.0)  # the min and max of an activation I-BERT's QuantAct records in training (assumed)

VQ_IMAGE_SIDE = 1024  # px: an image of GLM-Image's usual 1024 x 1024 generation size


def workload(model: nn.Module, *, batch_size: int, seq_len: int, image_size: int | None) -> Workload | None:
    """The workload of an encoder this module knows (see the module docstring), else None."""
    config: Any = getattr(model, "config", None)
    if getattr(config, "model_type", None) == "glm_image_vqmodel" and hasattr(model, "encode"):
        return _vq_workload(model, batch_size, image_size or VQ_IMAGE_SIDE)
    if getattr(config, "model_type", None) == "ibert":
        return _ibert_workload(model, batch_size, seq_len)
    if config is None or getattr(config, "model_type", None) != "longformer" or getattr(model, "main_input_name", "") != "input_ids":
        return None

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
    found = arrays_workload(model, arrays, description, Found(arrays, description, infer_drops=("labels",)))
    return replace(found, context=with_ties(found.context, ties=False))


def _vq_workload(model: nn.Module, b: int, side: int) -> Workload:
    """GLM-Image's VQ-VAE ``encode`` on the tower's features of ``b`` images of ``side`` px (see the module docstring)."""
    import torch
    from transformers import GlmImageVisionConfig

    config: Any = model.config
    patch = GlmImageVisionConfig().patch_size
    grid = max(1, side // int(patch if isinstance(patch, int) else patch[0]))
    shape = (b, int(config.latent_channels), grid, grid)
    dtype = model_dtype(model)

    def make_inputs() -> dict[str, torch.Tensor]:
        return {"hidden_states": torch.randn(shape, dtype=dtype)}

    def train_loss(m: nn.Module, x: dict[str, torch.Tensor]) -> torch.Tensor:
        return m.encode(x["hidden_states"]).embedding_loss  # type: ignore[operator]

    def infer(m: nn.Module, x: dict[str, torch.Tensor]) -> Any:
        return m.encode(x["hidden_states"])  # type: ignore[operator]

    return Workload(ModelKind.VISION_BASE, make_inputs, train_loss, infer,
                    f"hidden_states {'x'.join(map(str, shape))}: the vision tower's features of {b} image(s) of {side} px "
                    f"({grid}x{grid} patches of 16 px), GLM-Image's input to encode; training: its embedding_loss")


def _ibert_workload(model: nn.Module, b: int, n: int) -> Workload:
    """I-BERT's token-id workload with its activation ranges' questions answered (see the module docstring)."""
    import contextlib
    from collections.abc import Iterator

    import torch

    found = generic_workload(model, batch_size=b, seq_len=n)
    initial: list[tuple[str, Any]] = []
    for name, module in model.named_modules():
        if type(module).__name__ == "QuantAct" and not module.per_channel:
            fresh = type(module)(module.activation_bit, act_range_momentum=module.act_range_momentum,  # on the CPU
                                 per_channel=False, quant_mode=module.quant_mode)
            initial += [(f"{name}.x_min", fresh.x_min.detach().cpu()), (f"{name}.x_max", fresh.x_max.detach().cpu())]
    inner = found.context or KnownValues

    @contextlib.contextmanager
    def context() -> Iterator[None]:
        for name, real in initial:
            buffer = model.get_buffer(name)
            if isinstance(buffer, torch._subclasses.fake_tensor.FakeTensor):
                know(buffer, real)
        with inner(), KnownConstants(finite=True), _Ranges():
            yield

    return replace(found, context=context, description=f"{found.description}; in training, activations never NaN (a run that has "
                                                       "not diverged) and the ranges training records taken as [-1, 1]")



class _Ranges(TorchDispatchMode):
    """The full ``min()`` / ``max()`` of an unknown float tensor known as :data:`IBERT_RANGE` (I-BERT's context only)."""

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None) -> Any:
        import torch

        out = func(*args, **(kwargs or {}))
        if func in (torch.ops.aten.min.default, torch.ops.aten.max.default) and args[0].is_floating_point() \
                and known_value(args[0]) is None and isinstance(out, torch._subclasses.fake_tensor.FakeTensor):
            with _disable_current_modes():
                know(out, torch.tensor(IBERT_RANGE[func is torch.ops.aten.max.default], dtype=out.dtype))
        return out
