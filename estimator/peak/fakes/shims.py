"""Stand-ins for ops whose fake (meta) kernel is stricter than the real kernel, and for the one
data-dependent decision of transformers' masks.

Each stand-in returns outputs with the shapes, dtypes and strides the real kernel returns; it runs
below the tracker, so whatever it allocates to find them is not counted.

- ``aten._grouped_mm``: the meta kernel accepts only bf16/fp16 (the CUDA kernels' limits) while
  the CPU kernel also runs fp32 (transformers' MoE ``grouped_mm`` experts use it on CPU). The
  stand-in runs the meta kernel on bf16 copies and returns an empty tensor of the real dtype.
- batch norm (forward and backward): the normalised output in the input's suggested memory format,
  as the kernels allocate it, where the meta kernels keep a non-contiguous input's strides.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

from estimator.peak.fakes.known_values import KNOWN

__all__ = ["OVERRIDES", "StandIns", "cpu_rng_states", "unpadded_masks"]


def _grouped_mm(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    a, b = args[0], args[1]
    if a.dtype in (torch.bfloat16, torch.float16) and b.dtype == a.dtype:
        return func(*args, **kwargs)
    out_dtype = kwargs.get("out_dtype") or a.dtype
    low = (a.to(torch.bfloat16), b.to(torch.bfloat16), *args[2:])
    kw = dict(kwargs)
    kw.pop("out_dtype", None)
    bias = kw.get("bias")
    if bias is not None:
        kw["bias"] = bias.to(torch.bfloat16)
    ref = func(*low, **kw)
    return torch.empty_strided(ref.size(), ref.stride(), dtype=out_dtype, device=ref.device)


def _batch_norm(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Batch norm's normalised output (and its backward's ``grad_input``) in the layout the kernels give it: ATen's
    ``batch_norm_cpu`` / ``batch_norm_backward_cpu`` allocate it ``empty_like(input, input.suggest_memory_format())``,
    contiguous unless the input is channels-last, while the meta kernels keep a non-contiguous input's strides (a
    transposed (B, T, C) -> (B, C, T) input, PatchTST's ``BatchNorm1d``: the real output transposed back is
    not contiguous, so the next ``Linear`` copies it, a copy the fake run did not make)."""
    out = func(*args, **kwargs)
    x = args[1] if func is torch.ops.aten.native_batch_norm_backward.default else args[0]
    first = out[0]
    if not isinstance(first, torch.Tensor) or not isinstance(x, torch.Tensor) or first.shape != x.shape:
        return out
    layout = torch._prims_common.suggest_memory_format(x)
    if first.is_contiguous(memory_format=layout):
        return out
    real = torch.empty(first.shape, dtype=first.dtype, device=first.device).contiguous(memory_format=layout)
    return (real, *out[1:])


OVERRIDES: dict[Any, Callable[[Any, tuple[Any, ...], dict[str, Any]], Any]] = {
    torch.ops.aten._grouped_mm.default: _grouped_mm,
    **{op: _batch_norm for op in (torch.ops.aten.native_batch_norm.default, torch.ops.aten.native_batch_norm_backward.default,
                                  torch.ops.aten._native_batch_norm_legit.default,
                                  torch.ops.aten._native_batch_norm_legit.no_stats,
                                  torch.ops.aten._native_batch_norm_legit_no_training.default)},
}


class StandIns(TorchDispatchMode):
    """:data:`OVERRIDES` without the tracker, for work that is run but not counted (the prefill that
    fills the cache before the tracked last decode step): a float32 MoE's ``grouped_mm`` runs there
    as it does in the tracked step."""

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None) -> Any:
        override = OVERRIDES.get(func)
        return func(*args, **(kwargs or {})) if override is None else override(func, args, kwargs or {})


def _known_values(mask: Any) -> Any:
    """The real values of a fake padding mask made from inputs whose values are known
    (:mod:`estimator.peak.fakes.known_values`), else None: the simulated inputs have no padding, so all ones."""

    return KNOWN.get(mask)


@contextlib.contextmanager
def unpadded_masks() -> Iterator[None]:
    """transformers skips building an attention mask (``is_causal`` / no mask to SDPA) when the 2-D
    padding mask is all ones (``masking_utils._ignore_causal_mask_sdpa`` and
    ``_ignore_bidirectional_mask_sdpa``: ``padding_mask.all()``), a question about data that a fake
    tensor cannot answer, so it would always build the 4-D mask. The simulated inputs have no padding
    (no ``attention_mask`` is given; a padding mask a model makes for itself, like BART's decoder's
    ``torch.ones``, is all ones), so here a fake padding mask is answered as all ones, as the real run
    answers it. Measured: BART's decoder then keeps no (B, 1, L, L) mask, as on the real run.
    A padding mask made from inputs whose values are known (:mod:`estimator.peak.fakes.known_values`: Qwen2-Audio's
    mask of a clip's frames in its 30 s window) is answered with its real values: the 4-D mask is built as
    on the real run (measured: Qwen2-Audio's (B, 1, 1500, 1500) float mask, -0.0001% against the allocator).
    """
    masking: Any = sys.modules.get("transformers.masking_utils")
    if masking is None:
        yield
        return
    causal, bidirectional = getattr(masking, "_ignore_causal_mask_sdpa", None), getattr(masking, "_ignore_bidirectional_mask_sdpa", None)
    if causal is None or bidirectional is None:  # another transformers: nothing to answer
        yield
        return

    def asked(ignore: Any) -> Any:
        def answer(mask: Any, *a: Any, **k: Any) -> Any:
            if not isinstance(mask, torch._subclasses.fake_tensor.FakeTensor):
                return ignore(mask, *a, **k)
            # a mask whose real values are known (made from the processor's masks: Qwen2-Audio's frames of a
            # clip padded to 30 s) is answered with them, outside the fake modes; any other as all ones
            real = _known_values(mask)
            if real is None:
                return ignore(None, *a, **k)
            with _disable_current_modes():
                return bool(ignore(real, *a, **k))
        return answer

    packed = getattr(masking, "find_packed_sequence_indices", None)
    masking._ignore_causal_mask_sdpa = asked(causal)
    masking._ignore_bidirectional_mask_sdpa = asked(bidirectional)
    recurrent = _recurrent_masks(masking)
    if packed is not None:
        # Without a cache (training with checkpointing) transformers looks for packed sequences in the
        # position ids, a data question too: the simulated position ids are one unpacked sequence.
        masking.find_packed_sequence_indices = lambda position_ids, *a, **k: None if isinstance(
            position_ids, torch._subclasses.fake_tensor.FakeTensor) else packed(position_ids, *a, **k)
    try:
        yield
    finally:
        masking._ignore_causal_mask_sdpa = causal
        masking._ignore_bidirectional_mask_sdpa = bidirectional
        if packed is not None:
            masking.find_packed_sequence_indices = packed
        recurrent()


def _recurrent_masks(masking: Any) -> Callable[[], None]:
    """The same question in ``create_recurrent_attention_mask`` (the padding mask that linear-attention and SSM
    layers multiply their input by: Qwen3.5, Qwen3-Next, Mamba2, Jamba, Bamba...): transformers skips the mask when
    ``torch.all(attention_mask == 1)``, but only where ``is_tracing(attention_mask)`` is false, and a fake tensor
    counts as tracing, so the simulation would always multiply (a (B, S, hidden) copy the real run does not make:
    measured on MiniCPM-o OCR, 111,104 bytes too many at its prefill peak). A fake 2-D mask is answered as in
    :func:`unpadded_masks`: with its known values, else as all ones. Returns the undo. The modeling modules
    imported it by name: each one holding the function gets the answering one."""
    original = getattr(masking, "create_recurrent_attention_mask", None)
    if original is None:
        return lambda: None

    def answer(config: Any, inputs_embeds: Any, attention_mask: Any, *a: Any, **k: Any) -> Any:
        if isinstance(attention_mask, torch._subclasses.fake_tensor.FakeTensor) and attention_mask.ndim == 2:
            real = _known_values(attention_mask)
            with _disable_current_modes():
                ones = real is None or bool(torch.all(real == 1))
            if ones:
                return None
        return original(config, inputs_embeds, attention_mask, *a, **k)

    holders = _holders(original)
    for module in holders:
        setattr(module, "create_recurrent_attention_mask", answer)  # noqa: B010 - the name is the point
    # the layer-type table (create_masks_for_generate, MTP layers): its entries, and those of its "hybrid" entries
    mapping = getattr(masking, "LAYER_PATTERN_TO_MASK_FUNCTION_MAPPING", {})
    tables = [mapping, *(v for v in mapping.values() if isinstance(v, dict))]
    entries = [(table, key) for table in tables for key, value in table.items() if value is original]
    for table, key in entries:
        table[key] = answer

    def undo() -> None:
        for module in holders:
            setattr(module, "create_recurrent_attention_mask", original)  # noqa: B010
        for table, key in entries:
            table[key] = original
    return undo


# (the function, len(sys.modules), the last module's name) -> the modules holding it (a scan of every module's
# attributes, some of them lazy, costs more than a simulated step's mask; redone when a module was imported)
_HOLDERS: dict[tuple[int, int, str | None], tuple[Any, list[Any]]] = {}


def _holders(original: Any) -> list[Any]:
    """The loaded modules whose ``create_recurrent_attention_mask`` is ``original``."""
    key = (id(original), len(sys.modules), next(reversed(sys.modules), None))
    known = _HOLDERS.get(key)
    if known is None or known[0] is not original:
        _HOLDERS.clear()
        known = _HOLDERS[key] = (original, [m for m in list(sys.modules.values())
                                            if getattr(m, "create_recurrent_attention_mask", None) is original])
    return known[1]


@contextlib.contextmanager
def cpu_rng_states() -> Iterator[None]:
    """``torch.utils.checkpoint`` saves the CPU generator's state (``torch.get_rng_state()``, a uint8
    tensor of 5,056 bytes for the Mersenne Twister) for every checkpointed call and holds it until
    the recomputation; the call does not go through the dispatcher, so fakes would not see it. Here it
    returns a fake tensor of the real state's size, made by a torch op (so the tracker counts it and
    its lifetime), and ``torch.set_rng_state`` ignores fakes. Measured: two 5,056-byte states in a
    2-layer Llama's checkpointed backward on CPU."""
    get, set_ = torch.get_rng_state, torch.set_rng_state
    nbytes = get().numel()

    def fake_state() -> torch.Tensor:
        return torch.empty(nbytes, dtype=torch.uint8)

    def restore(new_state: torch.Tensor) -> None:
        if not isinstance(new_state, torch._subclasses.fake_tensor.FakeTensor):
            set_(new_state)

    torch.get_rng_state, torch.set_rng_state = fake_state, restore
    try:
        yield
    finally:
        torch.get_rng_state, torch.set_rng_state = get, set_
