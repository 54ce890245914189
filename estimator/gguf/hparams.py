"""The hyperparameters llama.cpp reads from a GGUF header, per layer, as ``llama_hparams`` holds them.

``{arch}.attention.head_count`` / ``head_count_kv`` may be one number or one per layer;
``key_length`` / ``value_length`` default to ``embedding_length / head_count``; sliding-window
layers follow ``{arch}.attention.sliding_window_pattern`` when the file has it (a number or one
bool per layer) and otherwise the pattern llama.cpp's model code sets for the architecture
(``load_swa_pattern(ml, n)`` in ``src/models/<arch>.cpp``). A file with
``attention.key_length_mla`` is an MLA model (DeepSeek-V2/V3, Kimi-K2...): llama.cpp caches the
compressed latent and the rope part as K (``key_length`` wide, one KV head) and stores no V.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from estimator.errors import UnsupportedError
from estimator.gguf.header import ArrayLength, GGUFHeader

# arch -> (pattern n, dense_first, default n_swa): llama.cpp's load_swa_pattern / set_swa_pattern calls
SWA_PATTERNS: dict[str, tuple[int, bool, int]] = {
    "gemma2": (2, False, 4096),
    "gemma3": (6, False, 0),
    "gemma-embedding": (6, False, 0),
    "cohere2": (4, False, 0),
    "cohere2moe": (4, True, 0),
    "exaone4": (4, False, 4096),
    "exaone-moe": (4, False, 128),
    "llama4": (4, False, 8192),
    "gpt-oss": (2, False, 0),
    "olmo2": (4, False, 0),
    "smallthinker": (4, True, 4096),
    "plamo3": (8, False, 0),
    "afmoe": (4, False, 0),
}
# architectures llama.cpp runs without a KV cache (encoders, diffusion LMs): llama_model::create_memory returns none
NO_KV_CACHE = frozenset({
    "bert", "jina-bert-v2", "jina-bert-v3", "nomic-bert", "nomic-bert-moe", "neo-bert", "eurobert", "wavtokenizer-dec",
    "modern-bert", "gemma-embedding", "dream", "llada", "llada-moe", "rnd1",
})
# layers with a recurrent state (Mamba, RWKV, short convolutions): not a KV cache, not estimated here
_RECURRENT_KEYS = (".ssm.", ".wkv.", ".shortconv.", ".time_mix_", ".token_shift_count")


@dataclass(frozen=True)
class HParams:
    """Per-layer attention shape and the sizes the compute buffer depends on."""

    arch: str
    n_layer: int
    n_ctx_train: int
    n_embd: int
    n_vocab: int
    n_head: tuple[int, ...]
    n_head_kv: tuple[int, ...]
    head_k: tuple[int, ...]
    head_v: tuple[int, ...]
    is_swa: tuple[bool, ...]
    n_swa: int
    mla: bool
    n_ff: int
    n_expert: int
    n_expert_used: int
    n_ff_exp: int
    has_kv_cache: bool = True
    head_k_mla: int = 0  # MLA: the query/key head width before absorption (``attention.key_length_mla``), 0 otherwise
    q_lora: int = 0  # MLA: ``attention.q_lora_rank`` (0: the query is projected directly)
    kv_lora: int = 0  # MLA: ``attention.kv_lora_rank`` (the cached latent; ``key_length`` = it + the rope part)
    n_ff_dense: int = 0  # an MoE model's dense feed-forward width when some layers are dense (DeepSeek's first layers), else 0
    shared_expert: bool = False  # MoE layers with a shared expert (``ffn_*_shexp`` tensors: DeepSeek, Qwen2-MoE, Kimi-K2...)

    def n_embd_k_gqa(self, il: int) -> int:
        return self.head_k[il] * self.n_head_kv[il]

    def n_embd_v_gqa(self, il: int) -> int:
        return 0 if self.mla else self.head_v[il] * self.n_head_kv[il]


def _per_layer(value: Any, n_layer: int, default: int) -> tuple[int, ...]:
    if value is None:
        return (default,) * n_layer
    if isinstance(value, list):
        return tuple(int(v) for v in value[:n_layer]) + (int(value[-1]) if value else default,) * max(0, n_layer - len(value))
    return (int(value),) * n_layer


def _first(value: Any, default: int) -> int:
    if isinstance(value, list):
        return int(max(value)) if value else default
    return default if value is None else int(value)


def hparams(header: GGUFHeader) -> HParams:
    """The hyperparameters of the model whose first (or only) file has ``header``."""
    meta = header.metadata
    arch = str(meta.get("general.architecture", ""))

    def key(name: str) -> Any:
        return meta.get(f"{arch}.{name}")

    if any(marker in name for name in meta for marker in _RECURRENT_KEYS):
        raise UnsupportedError(
            f"{header.filename}: {arch} has recurrent (state-space or RWKV) layers; their state is not estimated for GGUF files yet."
        )
    n_layer = _first(key("block_count"), 0)
    n_embd = _first(key("embedding_length"), 0)
    if not arch or n_layer <= 0 or n_embd <= 0:
        raise UnsupportedError(f"{header.filename} names no architecture, block count or embedding length; it is not a language model llama.cpp runs.")
    n_head = _per_layer(key("attention.head_count"), n_layer, 0)
    n_head_kv = _per_layer(key("attention.head_count_kv"), n_layer, 0) if key("attention.head_count_kv") is not None else n_head
    head_default = n_embd // max(n_head) if max(n_head, default=0) else 0
    head_k_full = _first(key("attention.key_length"), head_default)
    head_v_full = _first(key("attention.value_length"), head_default)
    head_k_swa = _first(key("attention.key_length_swa"), head_k_full)
    head_v_swa = _first(key("attention.value_length_swa"), head_v_full)

    pattern = SWA_PATTERNS.get(arch)
    n_swa = _first(key("attention.sliding_window"), pattern[2] if pattern else 0)
    stated = key("attention.sliding_window_pattern")
    if isinstance(stated, list):
        is_swa = tuple(bool(v) for v in stated[:n_layer]) + (False,) * max(0, n_layer - len(stated))
    elif n_swa > 0 and (pattern is not None or stated is not None):
        n_pattern = int(stated) if stated is not None else pattern[0] if pattern else 0
        dense_first = pattern[1] if pattern else False
        if dense_first:
            is_swa = tuple(n_pattern == 0 or il % n_pattern != 0 for il in range(n_layer))
        else:
            is_swa = tuple(n_pattern == 0 or il % n_pattern < n_pattern - 1 for il in range(n_layer))
    else:
        is_swa = (False,) * n_layer
    if not any(is_swa):
        n_swa = 0

    tokens = meta.get("tokenizer.ggml.tokens")
    embd = next((t for t in header.tensors if t.name == "token_embd.weight"), None)
    if isinstance(tokens, ArrayLength):
        n_vocab = tokens.length
    elif isinstance(tokens, list):
        n_vocab = len(tokens)
    elif key("vocab_size") is not None:
        n_vocab = int(key("vocab_size"))
    else:
        n_vocab = embd.shape[1] if embd is not None and len(embd.shape) > 1 else 0
    return HParams(
        arch=arch, n_layer=n_layer, n_ctx_train=_first(key("context_length"), 0), n_embd=n_embd, n_vocab=n_vocab,
        n_head=n_head, n_head_kv=n_head_kv,
        head_k=tuple(head_k_swa if s else head_k_full for s in is_swa),
        head_v=tuple(head_v_swa if s else head_v_full for s in is_swa),
        is_swa=is_swa, n_swa=n_swa, mla=key("attention.key_length_mla") is not None,
        n_ff=_first(key("feed_forward_length"), 0), n_expert=_first(key("expert_count"), 0),
        n_expert_used=_first(key("expert_used_count"), 0), n_ff_exp=_first(key("expert_feed_forward_length"), 0),
        has_kv_cache=arch not in NO_KV_CACHE, head_k_mla=_first(key("attention.key_length_mla"), 0),
        q_lora=_first(key("attention.q_lora_rank"), 0), kv_lora=_first(key("attention.kv_lora_rank"), 0),
        n_ff_dense=_first(key("feed_forward_length"), 0) if any(t.name.endswith(".ffn_up.weight") for t in header.tensors) else 0,
        shared_expert=any(t.name.endswith("_shexp.weight") for t in header.tensors),
    )
