"""The KV cache llama.cpp allocates for a context (``llama_kv_cache`` / ``llama_kv_cache_iswa``).

* the context: ``n_ctx`` (0 = the model's training context), padded up to a multiple of 256
  (``llama_context``: ``GGML_PAD(n_ctx, 256)``); one sequence, so ``n_ctx_seq = n_ctx``;
* every layer with KV heads holds ``K = ggml_row_size(type_k, n_embd_k_gqa) * cells`` and the
  same for V (``n_embd_*_gqa = head length * n_head_kv`` of the layer); an MLA model stores no V;
  without flash attention V is stored transposed at the widest layer's width;
* sliding-window layers get their own cache of ``GGML_PAD(min(n_ctx, n_swa + n_ubatch), 256)``
  cells (``llama_kv_cache_iswa``, the default ``swa_full = false``); the other layers ``n_ctx``.
"""

from __future__ import annotations

from dataclasses import dataclass

from estimator.errors import BadOptionError, Option
from estimator.gguf.hparams import HParams

CTX_PAD = 256
SWA_PAD = 256
DEFAULT_UBATCH = 512


def row_bytes(cache_type: str, n: int) -> int:
    """``ggml_row_size``: the bytes of ``n`` values of a cache type (gguf-py's block table)."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    qtype = GGMLQuantizationType[cache_type.upper()]
    block, size = GGML_QUANT_SIZES[qtype]
    if n % block:
        raise BadOptionError([Option("cache_type"), f" {cache_type} packs {block} values per block, and this model's rows of {n} values do not divide; use f16."])
    return n // block * size


def padded_ctx(n_ctx: int) -> int:
    return -(-n_ctx // CTX_PAD) * CTX_PAD


@dataclass(frozen=True)
class KVCache:
    """Bytes of the K and V caches, the cells of each kind of layer, and bytes per layer (0 for layers without KV)."""

    k_bytes: int
    v_bytes: int
    cells: int
    swa_cells: int
    layers: tuple[int, ...]

    @property
    def total(self) -> int:
        return self.k_bytes + self.v_bytes


def kv_cache(hp: HParams, n_ctx: int, *, type_k: str = "f16", type_v: str = "f16", flash_attn: bool = True, n_ubatch: int = DEFAULT_UBATCH) -> KVCache:
    """The KV cache of a context of ``n_ctx`` tokens (before padding) as llama.cpp allocates it for one sequence."""
    cells = padded_ctx(n_ctx)
    if not hp.has_kv_cache:  # an encoder or diffusion model: no cache; its batch attends to itself
        return KVCache(k_bytes=0, v_bytes=0, cells=min(cells, n_ubatch), swa_cells=0, layers=(0,) * hp.n_layer)
    swa_cells = -(-min(cells, hp.n_swa + n_ubatch) // SWA_PAD) * SWA_PAD if any(hp.is_swa) else 0
    v_width_max = max((hp.n_embd_v_gqa(il) for il in range(hp.n_layer)), default=0)
    k_total = v_total = 0
    layers = []
    for il in range(hp.n_layer):
        if hp.n_head_kv[il] == 0:
            layers.append(0)
            continue
        n = swa_cells if hp.is_swa[il] else cells
        k = row_bytes(type_k, hp.n_embd_k_gqa(il)) * n
        v_width = hp.n_embd_v_gqa(il) if flash_attn or hp.mla else v_width_max
        v = row_bytes(type_v, v_width) * n if v_width else 0
        k_total += k
        v_total += v
        layers.append(k + v)
    return KVCache(k_bytes=k_total, v_bytes=v_total, cells=cells, swa_cells=swa_cells, layers=tuple(layers))
