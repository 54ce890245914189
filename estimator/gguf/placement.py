"""One GGUF row's verdict on one GPU, from llama.cpp's own offload plan: the same answer everywhere it is shown.

A GGUF model runs in llama.cpp whether or not it fits a GPU whole: the layers that do not fit stay in system memory
(:mod:`estimator.gguf.offload`). So the verdict has three values: **fits** (every layer, the KV cache and the compute
buffer on the GPU), **fits with N of M layers on the GPU** (the other layers and their KV cache in RAM, counted as
the CPU share) and **does not fit** (not even one layer next to the compute buffer). :class:`Plan` holds what the
row was computed from, so the "fits on" table (every GPU), the row's note, the CLI's fit line and the JSON ``fit``
all call :meth:`Plan.answer` with the GPU's capacity and print :meth:`Answer.text`.

The context is the row's (``--ctx``, else the prompt plus the tokens to generate, else the model's training
context as llama.cpp's ``-c 0``), and the answer says which. Where the whole model does not fit at a context the
user did not set, the answer offers what recent llama.cpp does on its own (``common/fit.cpp``,
``common_params_fit_impl``, run by ``llama_params_fit`` with ``--fit on``, the default): **first the context
shrinks**, by linear interpolation between ``fit_params_min_ctx`` (4,096) and the training context of the memory
at both ends, to the target of free memory less ``fit_params_target`` (1 GiB per device), rounded down to a
multiple of 256, every layer on the GPU ("step 2: try reducing memory use by reducing the context size"); only
when even 4,096 tokens leave too little does it **then offload fewer layers** at that minimum context ("step 3:
iteratively fill the back to front with dense layers"). A context (``-c``) or ``-ngl`` set by the user is kept
(``context size set by user ... no change``; ``n_gpu_layers already set by user``). Defaults from
``common/common.h`` (``fit_params_min_ctx = 4096``, ``fit_params_target = 1024 MiB``). We evaluate llama.cpp's
interpolation with our own memory model (:mod:`estimator.gguf.kv_cache`, :mod:`estimator.gguf.compute`) where
llama.cpp measures a dry-run allocation; for MoE models --fit also moves expert tensors to the CPU before whole
layers, which we do not model: the offer is in whole layers (``-ngl``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from estimator.gguf import compute, kv_cache, offload
from estimator.gguf.hparams import HParams
from estimator.gguf.weights import Weights
from estimator.units import format_bytes

FIT_MIN_CTX = 4096  # common_params::fit_params_min_ctx (common/common.h)
FIT_MARGIN = 1024 * 1024 * 1024  # common_params::fit_params_target, per device (common/common.h)
FIT_ALIGN = 256  # common_params_fit_impl: "round down context for CUDA backend"


class Verdict(StrEnum):
    FITS = "fits"
    PARTIAL = "fits_partially"
    NO = "does_not_fit"


@dataclass(frozen=True)
class Answer:
    """The split at the row's context on a GPU of ``capacity_bytes`` free, and llama.cpp ``--fit``'s own choice."""

    verdict: Verdict
    split: offload.Split
    capacity_bytes: int
    n_ctx: int
    ctx_source: str  # "given", "prompt" (seq_len + max_new_tokens) or "training" (the model's own, llama.cpp's -c 0)
    fit_ctx: int | None = None  # --fit: the context it shrinks to, every layer on the GPU
    fit_split: offload.Split | None = None  # --fit at its minimum context when even that leaves layers on the CPU
    fit_layers: int | None = None  # the GPU layers at fit_ctx: every one, or the -ngl asked

    def text(self) -> str:
        """The verdict sentence shown in the table, the note and the CLI."""
        s = self.split
        ctx = f"ctx {self.n_ctx:,}" + {"training": " (the model's, llama.cpp's default)", "prompt": " (prompt + new tokens)"}.get(self.ctx_source, "")
        if self.verdict is Verdict.FITS:
            head = f"fits ({format_bytes(self.capacity_bytes - s.gpu_bytes)} free) at {ctx}"
        elif self.verdict is Verdict.PARTIAL:
            head = f"fits with {s.n_gpu_layers} of {s.n_offloadable} layers on the GPU (CPU share {format_bytes(s.cpu_bytes)} in RAM) at {ctx}"
        else:
            head = f"does not fit ({format_bytes(s.gpu_bytes - self.capacity_bytes)} short) at {ctx}"
        if self.fit_ctx is not None:
            layers = "every layer fits" if self.fit_layers == s.n_offloadable else f"the {self.fit_layers} GPU layers asked fit"
            head += f"; {layers} at ctx {self.fit_ctx:,} (llama.cpp --fit shrinks the context first)"
        elif self.fit_split is not None and self.fit_split.n_gpu_layers > s.n_gpu_layers:
            head += (f"; at ctx {FIT_MIN_CTX:,} (llama.cpp --fit's minimum) {self.fit_split.n_gpu_layers} of "
                     f"{self.fit_split.n_offloadable} layers fit (CPU share {format_bytes(self.fit_split.cpu_bytes)})")
        return head

    def to_dict(self) -> dict[str, Any]:
        """The JSON ``fit`` keys a GGUF row adds (docs/CONTRACT.md)."""
        return {
            "verdict": self.verdict.value, "answer": self.text(), "ctx": self.n_ctx, "n_gpu_layers": self.split.n_gpu_layers,
            "n_offloadable": self.split.n_offloadable, "gpu_bytes": self.split.gpu_bytes, "cpu_bytes": self.split.cpu_bytes,
            "fit_ctx": self.fit_ctx, "fit_n_gpu_layers": None if self.fit_split is None else self.fit_split.n_gpu_layers,
        }


@dataclass(frozen=True)
class Plan:
    """What a GGUF inference row was computed from: enough to place its model on any GPU."""

    hp: HParams
    w: Weights
    n_ctx: int
    ctx_source: str
    type_k: str
    type_v: str
    flash_attn: bool
    n_gpu_layers: int | None = None  # -ngl set by the user: the split is fixed

    def split(self, n_ctx: int, n_gpu_layers: int) -> offload.Split:
        kv = kv_cache.kv_cache(self.hp, n_ctx, type_k=self.type_k, type_v=self.type_v, flash_attn=self.flash_attn)
        bufs = compute.buffers(self.hp, kv, flash_attn=self.flash_attn, type_k=self.type_k, type_v=self.type_v)
        return offload.split(self.w, kv, bufs, n_gpu_layers)

    def placed(self, n_ctx: int, capacity_bytes: int) -> offload.Split:
        """The user's split, else the most layers whose GPU bytes fit ``capacity_bytes``."""
        if self.n_gpu_layers is not None:
            return self.split(n_ctx, self.n_gpu_layers)
        kv = kv_cache.kv_cache(self.hp, n_ctx, type_k=self.type_k, type_v=self.type_v, flash_attn=self.flash_attn)
        bufs = compute.buffers(self.hp, kv, flash_attn=self.flash_attn, type_k=self.type_k, type_v=self.type_v)
        return offload.fit(self.w, kv, bufs, capacity_bytes)

    def answer(self, capacity_bytes: int) -> Answer:
        """The verdict on a GPU with ``capacity_bytes`` free (its driver's total less the CUDA context)."""
        s = self.placed(self.n_ctx, capacity_bytes)
        if s.gpu_bytes > capacity_bytes:
            verdict = Verdict.NO  # the user's -ngl, or not even the compute buffer and one layer
        elif s.n_gpu_layers == s.n_offloadable:
            verdict = Verdict.FITS
        else:
            verdict = Verdict.PARTIAL if s.n_gpu_layers > 0 else Verdict.NO
        if verdict is Verdict.NO and s.n_gpu_layers == 0 and self.n_gpu_layers is None:
            s = self.split(self.n_ctx, 1)  # how far one layer is from fitting
        fit_ctx, fit_split = (None, None) if verdict is Verdict.FITS else self._llama_fit(capacity_bytes)
        fit_layers = None if fit_ctx is None else s.n_offloadable if self.n_gpu_layers is None else s.n_gpu_layers
        return Answer(verdict=verdict, split=s, capacity_bytes=capacity_bytes, n_ctx=self.n_ctx, ctx_source=self.ctx_source,
                      fit_ctx=fit_ctx, fit_split=fit_split, fit_layers=fit_layers)

    def _llama_fit(self, capacity_bytes: int) -> tuple[int | None, offload.Split | None]:
        """llama.cpp ``--fit``'s step 2 (shrink the context) and step 3 (fewer layers at the minimum context).

        Only for a context the user did not set (``-c 0``: the training context; a ``--ctx`` or a prompt length is
        kept, as llama.cpp keeps ``-c``); the margin is --fit's 1 GiB.
        """
        if self.ctx_source != "training" or self.n_ctx <= FIT_MIN_CTX:
            return None, None
        layers = -1 if self.n_gpu_layers is None else self.n_gpu_layers
        target = capacity_bytes - FIT_MARGIN
        used_max = self.split(self.n_ctx, layers).gpu_bytes
        if used_max <= target:  # step 1: "will leave ... free device memory, no changes needed"
            return None, None
        used_min = self.split(FIT_MIN_CTX, layers).gpu_bytes
        if target > used_min and used_max > used_min:
            n_ctx = FIT_MIN_CTX + (self.n_ctx - FIT_MIN_CTX) * (target - used_min) // (used_max - used_min)
            return max(n_ctx - n_ctx % FIT_ALIGN, FIT_MIN_CTX), None
        if self.n_gpu_layers is not None:
            return None, None  # --fit stops: "n_gpu_layers already set by user"
        return None, self.placed(FIT_MIN_CTX, target)
