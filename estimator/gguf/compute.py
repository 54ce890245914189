"""llama.cpp's compute and output buffers for one sequence, from what its graph holds at the allocator's high-water mark.

llama.cpp reserves its compute buffer once, for the worst batch: ``T = min(n_ctx, n_ubatch)`` tokens (default
``n_ubatch`` 512), every one an output, attending to every cell of the cache (``llama_context::sched_reserve``,
``graph_reserve``). ggml's graph allocator (``ggml-alloc.c``, ``ggml_gallocr_alloc_graph``) places the graph's inputs
first, then every node best-fit in the free blocks (or on top), in place of a source it may overwrite, and frees a tensor
once its last consumer has run (an input too); the buffer is the high-water mark. We do not re-run that allocator: the
terms below are the tensors live at its high-water mark, read off the allocator's own placement of the real graphs
(every node's offset, printed through ``llama_context_params.cb_eval`` on a decode of ``T`` tokens, which reproduces the
reserved size to the byte) and checked in total against ``llama_get_memory_breakdown`` (``bench/gguf_llamacpp.py``).

**Inputs**, in bytes (``llm_graph_context::build_inp_*``, ``llama_kv_cache::build_input_*``): token ids ``4T`` and the
float embeddings input ``4ET``, unused for tokens but allocated (``build_inp_embd``), positions ``4T``, output ids ``4T``
(``build_inp_out_ids``, made even when every token is an output); per cache (two with sliding-window layers,
``llama_kv_cache_iswa``): K row indices ``8T``, V row indices ``8T`` (``8T * n_embd_v_gqa`` without flash attention, V
being stored transposed; none for MLA, which stores no V), the mask ``n_kv x T`` (f16 with flash attention, f32 without:
``build_attn_inp_kq_mask``) and, for a quantized cache, the Hadamard matrices (``attn_rot``: ``build_input_k_rot``,
``n x n`` f32 with ``n`` the largest power of two from 64 dividing the K head; ``build_input_v_rot``, 64 x 64).

**A layer**, in floats per token (``E`` embedding width; ``F`` feed-forward width, for MoE
``n_expert_used * expert_feed_forward_length``; ``Q = n_head * head_dim``; ``H = n_head``), the larger of:

* attention: the residual and the normed input ``2E``, the query and the attention output ``2Q``, and without flash
  attention the ``H`` score matrices ``H * n_kv`` (``build_attn_mha``: ``kq``). MLA (``src/models/deepseek2.cpp``,
  the absorbed path) holds the query ``H * key_length_mla``, its no-rope part absorbed into the latent
  ``H * kv_lora_rank``, its rope part ``H * n_rot`` and their concatenation ``H * key_length`` (``_mla_query``); its
  scores fit in the freed absorbed query when ``n_kv <= kv_lora_rank``.
* the feed-forward block (``_ffn_peak``): the normed input and the residual ``2E`` with a hole between them, gate, up and
  their product ``3F``, less what fits in the hole. The hole: with flash attention, the freed attention output ``Q``
  (with a rotated cache only when ``Q > E``); in the last layer, which selects the output rows (``inp_out_ids``'
  ``get_rows``), at least ``E`` unless the inputs freed by then hold an ``E`` block. MoE: the router's logits and sorted
  ids ``2 * n_expert`` (in the hole), and the used experts' outputs ``n_expert_used * E`` (``ffn_moe_down``), which
  go in the freed gate and up blocks when they fit. An MoE model's dense layers (DeepSeek's first ones) count too.

**The output**: after the last layer the per-layer inputs are free; token ids, the embeddings input, the final norm
``E`` and the logits ``n_vocab`` per token remain, one ``E`` higher without a hole. With a real vocabulary this is the
compute buffer (Llama-3-8B's widths: 266.5 MiB on the CPU, measured; on a GPU the token inputs live in a host buffer and
the often-quoted 258.5 MiB is ``4T (E + n_vocab)``). A shared expert (DeepSeek) keeps the last layer's
normed input alive, and without a free ``E`` block below the routed experts' sum, the final norm and the logits land
above the routed experts' outputs.

This is a model of the allocator, not the allocator: ``bench/results/gguf_llamacpp.md`` gives its error per case,
including shapes held out while it was written. The output buffer is exact: llama.cpp keeps ``n_vocab`` float logits per
sequence (``llama_context::output_reserve``).
"""

from __future__ import annotations

from dataclasses import dataclass

from estimator.gguf.hparams import HParams
from estimator.gguf.kv_cache import DEFAULT_UBATCH, KVCache

_FLOAT_CACHES = ("f16", "f32", "bf16")


@dataclass(frozen=True)
class Buffers:
    """The compute buffer (the graph's intermediate tensors) and the output buffer (logits), in bytes."""

    compute: int
    output: int
    n_tokens: int


def _rotation_k(hp: HParams, cache_type: str) -> int:
    """Bytes of ``attn_inp_k_rot`` (``llama_kv_cache::build_input_k_rot``): a quantized K cache, heads a multiple of 64 wide."""
    head = max(hp.head_k, default=0)
    if cache_type in _FLOAT_CACHES or hp.mla or head == 0 or head % 64:
        return 0
    n = 64
    while head % (2 * n) == 0:
        n *= 2
    return n * n * 4


def _rotation_v(hp: HParams, cache_type: str) -> int:
    """Bytes of ``attn_inp_v_rot`` (``build_input_v_rot``): a quantized V cache, heads a multiple of 64 wide; always 64 x 64."""
    head = max(hp.head_v, default=0)
    if cache_type in _FLOAT_CACHES or hp.mla or head == 0 or head % 64:
        return 0
    return 64 * 64 * 4


def _inputs(hp: HParams, kv: KVCache, tokens: int, *, flash_attn: bool, rotations: int) -> int:
    """Bytes of the graph's inputs: ids, embeddings input, positions, output ids; per cache its indices, mask and rotations."""
    total = tokens * (4 + 4 * hp.n_embd + 4 + 4)
    if not hp.has_kv_cache:  # encoders: one mask over the batch (build_attn_inp_no_cache)
        return total + kv.cells * tokens * (2 if flash_attn else 4)
    v_width = max((hp.n_embd_v_gqa(il) for il in range(hp.n_layer)), default=0)
    for n_kv in [kv.cells] + ([kv.swa_cells] if kv.swa_cells else []):
        total += 8 * tokens  # K row indices (i64)
        if not hp.mla:
            total += 8 * tokens * (1 if flash_attn else v_width)  # V row indices; per element when V is transposed
        total += n_kv * tokens * (2 if flash_attn else 4) + rotations
    return total


def _mla_query(hp: HParams) -> int:
    """Floats per token live while an MLA layer builds its absorbed query (``src/models/deepseek2.cpp``), besides E and 2E.

    The query ``H * key_length_mla`` (from the ``q_lora_rank`` wide ``q_a``, whose block is then free), its no-rope part
    absorbed into the latent ``H * kv_lora_rank``, the rope part ``H * n_rot`` (in ``q_a``'s freed block when it fits)
    and their concatenation ``H * key_length``.
    """
    n_head, key = max(hp.n_head, default=0), max(hp.head_k, default=0)
    rope = key - hp.kv_lora if hp.kv_lora else 0
    q_pe = n_head * rope
    return n_head * (hp.head_k_mla + hp.kv_lora + key) + (hp.q_lora if q_pe <= hp.q_lora else hp.q_lora + q_pe)


def _ffn_peak(e: int, f: int, hole: int, router: int, experts: int) -> tuple[int, bool]:
    """Floats per token at a feed-forward block's peak (``build_ffn`` / ``build_moe_ffn``), and whether its product went low.

    Below the block: the normed input ``E`` (in the freed block of the previous residual), then ``hole`` free floats,
    then the residual ``E``; gate, up and their product (``F`` each) are placed best-fit above or in the free blocks.
    """
    below = 2 * e + hole
    if router:
        # the router's tensors take the hole (best fit); the product goes in the freed normed input when it fits, else
        # above gate and up; the experts' outputs go in the freed gate and up blocks when they fit, else on top
        below = 2 * e + max(hole, router)
        if f <= e:
            return below + max(2 * f, experts), False
        return below + 3 * f + (experts if experts > 2 * f else 0), False
    if hole and f <= hole:  # the gate goes in the hole
        return below + 2 * f, False
    if hole and f <= e + hole:  # the product goes in the freed normed input and the hole
        return below + 2 * f, True
    return below + 3 * f, False


@dataclass(frozen=True)
class GraphParts:
    """The compute buffer's terms (bytes): the graph's inputs, the high-water mark through the layers (the inputs
    included) and after them (the output), and the token ids and embeddings input kept to the end."""

    inputs: int
    layers: int
    output: int
    kept: int
    n_tokens: int


def buffers(
    hp: HParams, kv: KVCache, *, flash_attn: bool, type_k: str = "f16", type_v: str = "f16", n_ubatch: int = DEFAULT_UBATCH, n_seq: int = 1,
) -> Buffers:
    """The compute and output buffers llama.cpp allocates for ``hp`` with the cache ``kv``."""
    found = graph_parts(hp, kv, flash_attn=flash_attn, type_k=type_k, type_v=type_v, n_ubatch=n_ubatch)
    return Buffers(compute=max(found.layers, found.output), output=4 * hp.n_vocab * n_seq, n_tokens=found.n_tokens)


def graph_parts(
    hp: HParams, kv: KVCache, *, flash_attn: bool, type_k: str = "f16", type_v: str = "f16", n_ubatch: int = DEFAULT_UBATCH,
) -> GraphParts:
    """:func:`buffers`' terms, apart (a layer split over several GPUs puts them on different devices)."""
    tokens = min(kv.cells, n_ubatch)
    rotations = _rotation_k(hp, type_k) + _rotation_v(hp, type_v)
    e = hp.n_embd
    q = max((h * d for h, d in zip(hp.n_head, hp.head_k, strict=True)), default=0)
    f = hp.n_expert_used * hp.n_ff_exp if hp.n_expert and hp.n_ff_exp else hp.n_ff

    inputs = _inputs(hp, kv, tokens, flash_attn=flash_attn, rotations=rotations)
    kept = tokens * (4 + 4 * e)  # token ids and the embeddings input stay to the end; the other inputs are freed after the last attention
    # With flash attention the attention output (Q wide) is freed just before the feed-forward block and leaves a hole
    # between its normed input and the residual; with a rotated (quantized) cache only when Q > E. The last layer (which
    # selects the output rows: inp_out_ids' get_rows of the attention output and of the residual) leaves an E hole too,
    # unless the freed inputs hold an E block.
    hole = q if flash_attn and not hp.mla and (not rotations or q > e) else 0
    last_hole = hole or (e if flash_attn and inputs - kept < 4 * tokens * e else 0)
    router = 2 * hp.n_expert if hp.n_expert else 0  # build_moe_ffn: ffn_moe_logits (probs in place) and ffn_moe_argsort
    experts = hp.n_expert_used * e  # build_moe_ffn: ffn_moe_down, each used expert's output
    ffn, _ = _ffn_peak(e, f, hole, router, experts)
    ffn_last, product_low = _ffn_peak(e, f, last_hole, router, experts)
    if router and hp.n_ff_dense:  # an MoE model's dense layers (DeepSeek's first ones)
        ffn = max(ffn, _ffn_peak(e, hp.n_ff_dense, hole, 0, 0)[0])
    n_head = max(hp.n_head, default=0)
    # the residual and the normed input, and the query and attention output; MLA: the query, its rope part, the absorbed
    # no-rope part and their concatenation (deepseek2.cpp); without flash attention the score matrices kq
    query = _mla_query(hp) if hp.mla else 2 * q
    kq = 0 if flash_attn else n_head * kv.cells
    if hp.mla and kv.cells <= hp.kv_lora:  # the scores fit in the freed absorbed query (H * kv_lora_rank)
        kq = 0
    attention = 2 * e + query + kq

    layers = inputs + 4 * tokens * max(ffn, attention, ffn_last)
    # the output: token ids, the embeddings input, the final norm and the logits. Without a hole the last layer's residual
    # sits in the first block of the freed inputs, and the final norm and the logits go one E block higher; when the
    # last layer's product went low, its output (and so the final norm and the logits) takes the gate's place.
    output = kept + 4 * tokens * (e + hp.n_vocab + (0 if last_hole else e))
    if product_low and inputs - kept < 4 * tokens * f:
        output = max(output, inputs + 4 * tokens * (3 * e + last_hole + hp.n_vocab))
    if hp.shared_expert and not last_hole:
        # the shared expert keeps the last layer's normed input alive: with no free E block below, the routed experts'
        # sum (then the final norm and the logits) goes above their outputs, which sit above the normed input and the
        # residual (in the freed inputs, after the router, when those hold an E block)
        below = inputs if inputs - kept < 4 * tokens * e else kept + 4 * tokens * router
        output = max(output, below + 4 * tokens * ((3 + hp.n_expert_used) * e + hp.n_vocab))
    return GraphParts(inputs=inputs, layers=layers, output=output, kept=kept, n_tokens=tokens)
