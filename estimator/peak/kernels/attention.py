"""The attention kernel a simulated step runs (``--attn-implementation``): transformers' own choice unless asked.

transformers picks a model's attention function from ``config._attn_implementation`` at each forward
(``ALL_ATTENTION_FUNCTIONS``); what a kernel allocates is what the simulation then counts:

* ``eager`` (``eager_attention_forward``): the score matrices ``(B, H, L, S)`` of ``Q Kᵀ``, the mask added, the
  softmax (in float32, cast back), dropout, then ``P V``: all materialised, and run as they are on the fakes.
* ``sdpa``: ``F.scaled_dot_product_attention``; on ``cpu`` PyTorch's CPU backends (flash or math) run on the fakes
  (:mod:`estimator.peak.kernels.cpu.flash`), on ``cuda`` the backend CUDA's dispatcher picks (flash, memory-efficient or
  math) allocates as it does there (:mod:`estimator.peak.kernels.cuda.sdpa`).
* ``flash_attention_2`` (CUDA only, float16/bfloat16): the ``flash-attn`` package, which cannot be imported without a
  GPU, so transformers' ``flash_attention_2`` entry is replaced meanwhile by :func:`_flash_attention_2`, which
  allocates what FlashAttention-2 allocates (Dao-AILab/flash-attention ``csrc/flash_attn/flash_api.cpp``:
  ``mha_fwd`` returns ``out`` like ``q`` and ``softmax_lse`` ``(B, H, L)`` float32, no score matrix; ``mha_bwd``
  ``dq``, ``dk``, ``dv`` (``dk_expanded``/``dv_expanded`` to the query heads with GQA), ``softmax_d``
  ``(B, H, round128(L))`` and ``dq_accum`` ``(B, round128(L), H, round8(D))`` float32). These are the same buffers
  PyTorch's own flash backend (FlashAttention-2, vendored) allocates, so the stand-in is
  :mod:`estimator.peak.kernels.cuda.sdpa`'s flash path. Its mask (``masking_utils.flash_attention_mask``) is None for the
  unpadded prompts simulated here, as there.

``flex_attention`` is refused before any work (:func:`estimator.options.check_supported`): its compiled kernel is not
modelled.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

__all__ = ["attention_kernel", "set_attention"]

FLASH_2 = "flash_attention_2"


def _configs(model: nn.Module) -> list[Any]:
    """Every config the model's modules read their attention implementation from (sub-configs included)."""
    seen: dict[int, Any] = {}
    for module in model.modules():
        config = getattr(module, "config", None)
        if config is not None and hasattr(config, "_attn_implementation"):
            seen[id(config)] = config
    return list(seen.values())


def set_attention(model: nn.Module, implementation: str | None) -> str | None:
    """Make ``model`` run ``implementation`` (None: as built, transformers' default); the one it runs, or None
    for a model without a transformers config (timm)."""
    from estimator.errors import Option, UnsupportedError

    configs = _configs(model)
    if implementation is None:
        return str(configs[0]._attn_implementation) if configs else None
    if not configs or not hasattr(model, "set_attn_implementation"):
        raise UnsupportedError([Option("attn_implementation"), f" chooses a transformers model's attention kernel; {type(model).__name__} "
                                "is not one: drop it."])
    if implementation == FLASH_2:
        # transformers' own check (PreTrainedModel._flash_attn_2_can_dispatch) wants the flash-attn package and a GPU,
        # which this machine need not have: its first condition, the class's support, is checked here; then it is set
        if not getattr(model, "_supports_flash_attn", False):
            raise UnsupportedError([Option("attn_implementation"), f" flash_attention_2: transformers does not support it for "
                                    f"{type(model).__name__}; use sdpa or eager."])
        for config in configs:
            config._attn_implementation = FLASH_2
    else:
        try:
            model.set_attn_implementation(implementation)  # type: ignore[operator]  # a transformers PreTrainedModel here
        except (ValueError, ImportError) as exc:  # transformers refuses a kernel the class does not support
            why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise UnsupportedError([Option("attn_implementation"), f" {implementation}: transformers refuses it for "
                                    f"{type(model).__name__} ({why})"]) from None
    return str(configs[0]._attn_implementation)


def _flash_attention_2(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask: Any,
                       dropout: float = 0.0, scaling: float | None = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers' ``flash_attention_forward`` (``integrations/flash_attention.py``) with FlashAttention-2's
    allocations: ``query`` ``(B, H, L, D)`` in, ``(B, L, H, D)`` out (the kernel's layout, transposed views in)."""
    from estimator.peak.kernels.cuda.sdpa import FusedAttention

    out = FusedAttention.apply(query, key, value, None, "flash")
    return out.transpose(1, 2), None


def _no_mask(*args: Any, **kwargs: Any) -> None:
    return None


@contextlib.contextmanager
def attention_kernel(implementation: str | None) -> Iterator[None]:
    """Meanwhile, transformers' ``flash_attention_2`` entries are the stand-ins above (nothing for the others)."""
    if implementation != FLASH_2:
        yield
        return
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    attention, masks = ALL_ATTENTION_FUNCTIONS._global_mapping, ALL_MASK_ATTENTION_FUNCTIONS._global_mapping
    saved = attention.get(FLASH_2), masks.get(FLASH_2)
    attention[FLASH_2], masks[FLASH_2] = _flash_attention_2, _no_mask
    try:
        yield
    finally:
        for mapping, original in ((attention, saved[0]), (masks, saved[1])):
            if original is None:
                mapping.pop(FLASH_2, None)
            else:
                mapping[FLASH_2] = original


def row_refusal(dtype: str, implementation: str | None) -> str | None:
    """Why a row is not simulated with this kernel (FlashAttention-2 refuses float32), or None."""
    if implementation == FLASH_2 and dtype == "float32":
        return ("float32: flash_attention_2 runs in float16 and bfloat16 only (FlashAttention-2 refuses float32, as transformers "
                "warns); peak_bytes is null: ask for float16 or bfloat16, or use sdpa")
    return None


def kernel_note(used: str | None, asked: str | None) -> str | None:
    """The row note saying which attention kernel the step ran."""
    if used is None:
        return None
    return f"attention: {used} ({'asked' if asked is not None else 'transformers default for this model'})"
