"""vLLM's decode throughput at the serving plan's concurrency, and its time to first token, on a GPU of the table.

From the model transformers builds on meta (its own tensors: every linear layer's shape and bytes) and the serving
plan (:mod:`estimator.serving.plan`: the concurrency its KV cache holds), one op per kernel vLLM runs, through the
roofline (:func:`estimator.speed.roofline.phase_time`), plus the links' time for several GPUs
(:mod:`estimator.speed.comm`). Labelled ``modelled``: vLLM's kernels are modelled on top of the roofline.

**Decode step** of ``B`` sequences, each with ``C`` positions in its cache (the plan's concurrency is for requests of
``max_model_len`` tokens, so ``C = max_model_len - 1``: the last step of the longest request; ``B = min(max_num_seqs,
floor(max_concurrency))``):

- every linear layer is one GEMM over the batch: its weight read **once per step for the whole batch** (vLLM batches
  all running sequences into one forward), ``2 x B x in x out`` FLOPs, the activations in and out; the input embedding
  reads ``B`` rows; with tensor parallelism each rank holds ``1/tp`` of every matrix (and, approximately, ``1/tp`` of
  each GEMM's activations);
- each attention layer is one FlashAttention / FlashInfer paged decode kernel reading **each sequence's own K and V**
  (``B x`` the layer's KV bytes at ``C + 1`` positions, a sliding layer's window at most) and the query, writing the
  output, ``4 x B x heads x head_dim x (C + 1)`` FLOPs (``torch.utils.flop_counter``'s SDPA count); the new token's K
  and V are written by ``reshape_and_cache`` (one kernel);
- per layer vLLM's fused kernels: two ``fused_add_rms_norm`` (read the hidden states, the residual and the weight,
  write both), ``rotary_embedding`` (query and key in place), ``silu_and_mul`` (read the gate and up halves, write one);
- **CUDA graphs** hide the launches (no kernel floor) where the batch is at most the largest captured size: vLLM's
  default capture sizes (``vllm/config/vllm.py``, ``VllmConfig._set_cudagraph_sizes``) are 1, 2, 4, then every 8 up
  to 248, then every 16 from 256 up to ``min(2 x max_num_seqs, 512, max_num_batched_tokens)``; a batch is padded up to
  the next captured size (the GEMMs and element-wise kernels run on the padded rows; attention on the real ones); a
  larger batch runs eagerly, each kernel at least :data:`~estimator.speed.roofline.KERNEL_FLOOR_S`.

Tokens/s = ``B`` / (the step's time + its tensor-parallel all-reduces + its pipeline sends). With pipeline parallelism
the step is counted as passing the stages one after another (vLLM overlaps ``pp`` batches in flight: the figure is a
lower bound there).

**Time to first token** of one prompt of ``max_model_len`` tokens on an idle server: chunked prefill (vLLM V1's
default) runs it in chunks of ``max_num_batched_tokens`` tokens, each a forward with the weights read once, causal
attention over the positions so far, and the logits of the last token only (vLLM computes logits only for the tokens
it samples).

Not modelled: the scheduler's and sampler's host time, speculative decoding, prefix caching, a mixture of experts,
multi-head latent attention, recurrent (Mamba) layers and quantized weights (those rows get no speed and say so).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any

from torch import nn

from estimator.speed.comm import Transfer, link_for, pipeline_transfers, tensor_parallel_transfers
from estimator.speed.cost import OpCost, Phase, PhaseCost
from estimator.speed.hardware import Hardware
from estimator.speed.roofline import Label, PhaseTime, phase_time

__all__ = ["ENGINE", "DecodeCount", "NotModelled", "cudagraph_capture_sizes", "decode_count", "padded_batch", "prefill_counts",
           "serving_speed"]

ENGINE = "vllm"
_DTYPES = {1: "float8", 2: "bfloat16", 4: "float32"}  # the compute dtype of activations of these bytes, unless named
_NOT_DECODER = ("vision", "visual", "multi_modal_projector", "mm_projector", "image_newline")  # run once per image, not per step
_MOE_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")


class NotModelled(ValueError):
    """The model or setting is outside what :mod:`estimator.speed.vllm_speed` models (the row says why)."""


def cudagraph_capture_sizes(max_num_seqs: int, max_num_batched_tokens: int) -> tuple[int, ...]:
    """vLLM's default CUDA-graph capture sizes (``VllmConfig._set_cudagraph_sizes``, no speculative decoding)."""
    largest = min(max_num_seqs * 2, 512, max_num_batched_tokens)
    sizes = [i for i in (1, 2, 4) if i <= largest]
    if largest >= 8:
        sizes += list(range(8, min(largest + 1, 256), 8))
    if largest >= 256:
        sizes += list(range(256, largest + 1, 16))
    return tuple(sizes)


def padded_batch(batch: int, sizes: tuple[int, ...]) -> int | None:
    """The captured size a batch of ``batch`` sequences replays (padded up), or None: larger than any, run eagerly."""
    i = bisect.bisect_left(sizes, batch)
    return sizes[i] if i < len(sizes) else None


@dataclass(frozen=True)
class _Linear:
    name: str
    fan_in: int
    fan_out: int
    weight_bytes: int  # weight and bias
    lm_head: bool


@dataclass(frozen=True)
class _Model:
    linears: tuple[_Linear, ...]
    embedding_row_bytes: int  # one row of the input embedding (read per token)
    other_bytes: int  # every other parameter (norm weights...), read once a forward
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    layers: int
    vocab: int


def _int(config: Any, *names: str) -> int | None:
    for name in names:
        value = getattr(config, name, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _read_model(model: nn.Module) -> _Model:
    built: Any = model  # a transformers PreTrainedModel
    config = built.config.get_text_config(decoder=True)
    if any(_int(config, k) for k in _MOE_KEYS):
        raise NotModelled("a mixture of experts' decode is not modelled yet (which experts a batch reads depends on the routing)")
    if _int(config, "kv_lora_rank") is not None:
        raise NotModelled("multi-head latent attention's decode kernels are not modelled yet")
    hidden, heads = _int(config, "hidden_size"), _int(config, "num_attention_heads")
    layers = _int(config, "num_hidden_layers")
    if not hidden or not heads or not layers:
        raise NotModelled(f"{type(config).__name__} names no hidden_size, num_attention_heads and num_hidden_layers")
    output = built.get_output_embeddings()
    embedding = built.get_input_embeddings()
    linears = []
    skipped = {id(p) for name, p in model.named_parameters() if any(part in name for part in _NOT_DECODER)}
    seen: set[int] = set(skipped)  # an image-text model's vision tower runs once per image, not in a decode step
    for name, module in model.named_modules():
        weight = getattr(module, "weight", None)
        if not isinstance(weight, nn.Parameter) or weight.dim() != 2 or module is embedding or id(weight) in skipped:
            continue
        if isinstance(module, nn.Linear):
            fan_in, fan_out = module.in_features, module.out_features
        elif type(module).__name__ == "Conv1D":  # GPT-2's transposed linear
            fan_in, fan_out = weight.shape[0], weight.shape[1]
        else:
            continue
        params = [p for p in module.parameters(recurse=False) if id(p) not in seen]
        seen.update(id(p) for p in module.parameters(recurse=False))
        linears.append(_Linear(name, int(fan_in), int(fan_out), sum(p.numel() * p.element_size() for p in params),
                               module is output))
    table = embedding.weight if isinstance(embedding, nn.Embedding) else None
    row = table[0].numel() * table.element_size() if table is not None else 0
    if table is not None:
        seen.add(id(table))
    other = sum(p.numel() * p.element_size() for p in model.parameters() if id(p) not in seen)
    kv_heads = _int(config, "num_key_value_heads") or heads
    head_dim = _int(config, "head_dim") or hidden // heads
    intermediate = _int(config, "intermediate_size", "ffn_dim", "n_inner") or 0
    vocab = _int(config, "vocab_size") or 0
    return _Model(tuple(linears), int(row), int(other), hidden, heads, kv_heads, head_dim, intermediate, layers, vocab)


@dataclass(frozen=True)
class DecodeCount:
    """One decode step's ops and what they read (per tensor-parallel rank, all pipeline stages together)."""

    cost: PhaseCost
    weight_bytes: int  # every parameter read once for the batch, the input embedding one row a token
    kv_read_bytes: int  # what the attention kernels read of the cache: each sequence's K and V at its context
    kv_write_bytes: int  # the new tokens' K and V
    attention_flops: int
    linear_flops: int


def _attention_positions(layout: Any, positions: int) -> list[int]:
    """Positions each attention layer covers at ``positions`` tokens of context (a sliding layer: its window at most)."""
    return [positions if layer.window is None else min(positions, layer.window) for layer in layout.attention]


def decode_count(model: nn.Module, layout: Any, *, batch: int, padded: int, context: int, act_bytes: int, tp: int = 1,
                 dtype: str | None = None) -> DecodeCount:
    """The decode step of ``batch`` sequences with ``context`` positions each in the cache (module docstring);
    ``padded``: the rows the CUDA graph runs (``batch`` where eager); ``layout``: the KV layout of one rank
    (:func:`estimator.serving.kv.kv_layout` of every layer, ``tp`` given)."""
    shape = _read_model(model)
    if layout.recurrent:
        raise NotModelled("recurrent (Mamba) layers' decode kernels are not modelled yet")
    dtype = dtype or _DTYPES.get(act_bytes, "float32")
    ops: list[OpCost] = [OpCost("embedding", 0, padded * shape.embedding_row_bytes // tp, padded * shape.hidden * act_bytes, dtype,
                                "vocabulary-parallel gather")]
    linear_flops = 0
    for lin in shape.linears:
        flops = 2 * padded * lin.fan_in * lin.fan_out // tp
        linear_flops += flops
        ops.append(OpCost(f"gemm {lin.name}", flops, lin.weight_bytes // tp + padded * lin.fan_in * act_bytes // tp,
                          padded * lin.fan_out * act_bytes // tp, dtype))
    heads, kv_heads = max(shape.heads // tp, 1), max(shape.kv_heads // tp, 1)
    q_bytes = batch * heads * shape.head_dim * act_bytes
    kv_read = kv_write = attention = 0
    per_token = {id(layer): layer.bytes_per_token for layer in layout.attention}
    for layer, covered in zip(layout.attention, _attention_positions(layout, context + 1), strict=True):
        flops = 4 * batch * heads * shape.head_dim * covered
        read = batch * per_token[id(layer)] * covered
        write = batch * per_token[id(layer)]
        kv_read += read
        kv_write += write
        attention += flops
        ops.append(OpCost("reshape_and_cache", 0, write, write, dtype, "vLLM's cache write"))
        ops.append(OpCost("paged attention decode", flops, read + q_bytes, q_bytes, dtype, "flop_counter's SDPA formula"))
    rows = padded * shape.hidden * act_bytes
    rope = padded * (heads + kv_heads) * shape.head_dim * act_bytes
    inter = padded * shape.intermediate * act_bytes // tp
    for _ in range(shape.layers):
        ops.append(OpCost("fused_add_rms_norm", 0, 2 * rows, 2 * rows, dtype, "element-wise"))
        ops.append(OpCost("rotary_embedding", 0, rope, rope, dtype, "element-wise"))
        ops.append(OpCost("fused_add_rms_norm", 0, 2 * rows, 2 * rows, dtype, "element-wise"))
        if inter:
            ops.append(OpCost("silu_and_mul", 0, 2 * inter, inter, dtype, "element-wise"))
    ops.append(OpCost("final norm and other weights", 0, shape.other_bytes // tp + rows, rows, dtype, "element-wise"))
    weights = sum(lin.weight_bytes for lin in shape.linears) // tp + padded * shape.embedding_row_bytes // tp + shape.other_bytes // tp
    return DecodeCount(PhaseCost(Phase.DECODE, tuple(ops), batch), weights, kv_read, kv_write, attention, linear_flops)


def _positions_sum(first: int, last: int, window: int | None) -> int:
    """``sum(min(p, window) for p in range(first + 1, last + 1))`` in closed form (each query at position ``p`` attends
    to ``p`` positions, a sliding layer's to its window at most)."""
    def upto(n: int) -> int:
        if window is None or n <= window:
            return n * (n + 1) // 2
        return window * (window + 1) // 2 + (n - window) * window
    return upto(last) - upto(first)


def prefill_counts(model: nn.Module, layout: Any, *, prompt: int, chunk: int, act_bytes: int, tp: int = 1,
                   dtype: str | None = None) -> list[PhaseCost]:
    """The chunks of one prompt of ``prompt`` tokens under chunked prefill (``chunk`` tokens each): the weights read
    once a chunk, causal attention over the positions so far, the logits of the last token only."""
    shape = _read_model(model)
    dtype = dtype or _DTYPES.get(act_bytes, "float32")
    heads = max(shape.heads // tp, 1)
    out = []
    for start in range(0, prompt, chunk):
        t = min(chunk, prompt - start)
        last = start + t >= prompt
        ops: list[OpCost] = [OpCost("embedding", 0, t * shape.embedding_row_bytes // tp, t * shape.hidden * act_bytes, dtype)]
        for lin in shape.linears:
            rows = 1 if lin.lm_head else t
            if lin.lm_head and not last:
                continue
            ops.append(OpCost(f"gemm {lin.name}", 2 * rows * lin.fan_in * lin.fan_out // tp,
                              lin.weight_bytes // tp + rows * lin.fan_in * act_bytes, rows * lin.fan_out * act_bytes, dtype))
        for layer in layout.attention:
            w = layer.window
            covered = _positions_sum(start, start + t, w)
            prior = start if w is None else min(start, w)
            io = t * heads * shape.head_dim * act_bytes
            ops.append(OpCost("reshape_and_cache", 0, t * layer.bytes_per_token, t * layer.bytes_per_token, dtype))
            ops.append(OpCost("flash attention prefill", 4 * heads * shape.head_dim * covered,
                              (prior + t) * layer.bytes_per_token + io, io, dtype, "flop_counter's SDPA formula, causal"))
        rows_b = t * shape.hidden * act_bytes
        inter = t * shape.intermediate * act_bytes // tp
        for _ in range(shape.layers):
            ops.append(OpCost("fused_add_rms_norm", 0, 4 * rows_b, 4 * rows_b, dtype))
            if inter:
                ops.append(OpCost("silu_and_mul", 0, 2 * inter, inter, dtype))
        ops.append(OpCost("other weights", 0, shape.other_bytes // tp, 0, dtype))
        out.append(PhaseCost(Phase.PREFILL, tuple(ops), t))
    return out


def _comm(transfers: tuple[Transfer, ...], hardware: Hardware, gpus: int) -> tuple[float, int, str | None, float | None]:
    """(seconds, bus bytes, link name, achievable link bytes/s) of a step's transfers."""
    if not transfers:
        return 0.0, 0, None, None
    link = link_for(hardware, gpus)
    if link is None:
        raise NotModelled(f"{hardware.name} states no link between GPUs in the hardware table")
    kind, rate = link
    return sum(t.seconds(kind, rate) for t in transfers), sum(t.bus_bytes for t in transfers), kind.value, rate


def serving_speed(model: nn.Module, layout: Any, hardware: Hardware, *, concurrency: int, max_model_len: int, max_num_seqs: int,
                  max_num_batched_tokens: int, act_bytes: int, tp: int = 1, pp: int = 1,
                  dtype: str | None = None) -> tuple[dict[str, Any], str]:
    """The ``speed`` object of a serving row and its note (module docstring); raises :class:`NotModelled`."""
    from estimator.speed.comm import LINK_FRACTION

    if concurrency < 1:
        raise NotModelled("no request of max_model_len tokens fits the KV cache: nothing to decode")
    shape = _read_model(model)
    context = max_model_len - 1
    sizes = cudagraph_capture_sizes(max_num_seqs, max_num_batched_tokens)
    graph = padded_batch(concurrency, sizes)
    padded = graph or concurrency
    count = decode_count(model, layout, batch=concurrency, padded=padded, context=context, act_bytes=act_bytes, tp=tp, dtype=dtype)
    step = phase_time(count.cost, hardware, launch_hidden=graph is not None, label=Label.MODELLED)
    gpus = tp * pp
    transfers = (*tensor_parallel_transfers(tokens=padded, hidden=shape.hidden, layers=shape.layers, vocab=shape.vocab,
                                            act_bytes=act_bytes, tp=tp),
                 *pipeline_transfers(tokens=padded, hidden=shape.hidden, act_bytes=act_bytes, pp=pp))
    comm_s, comm_bytes, link, rate = _comm(transfers, hardware, gpus)
    decode_s = step.seconds + comm_s
    chunks = prefill_counts(model, layout, prompt=max_model_len, chunk=max_num_batched_tokens, act_bytes=act_bytes, tp=tp,
                            dtype=dtype)
    chunk_times: list[PhaseTime] = [phase_time(c, hardware, launch_hidden=False, label=Label.MODELLED) for c in chunks]
    prefill_comm = 0.0
    for c in chunks:
        moved = (*tensor_parallel_transfers(tokens=c.tokens, hidden=shape.hidden, layers=shape.layers, vocab=0, act_bytes=act_bytes, tp=tp),
                 *pipeline_transfers(tokens=c.tokens, hidden=shape.hidden, act_bytes=act_bytes, pp=pp))
        prefill_comm += _comm(moved, hardware, gpus)[0]
    ttft = sum(t.seconds for t in chunk_times) + prefill_comm
    prefill_flops = sum(c.flops for c in chunks)
    tokens_s = concurrency / decode_s
    out: dict[str, Any] = {
        "engine": ENGINE, "hardware": hardware.name, "label": Label.MODELLED.value, "concurrency": concurrency,
        "decode_context": context, "decode_tokens_per_second": round(tokens_s, 1),
        "decode_tokens_per_second_per_sequence": round(1 / decode_s, 2), "decode_step_s": round(decode_s, 6),
        "decode_flops_per_step": count.cost.flops, "decode_bytes_per_step": count.cost.bytes_moved,
        "decode_weight_bytes_per_step": count.weight_bytes, "decode_kv_bytes_per_step": count.kv_read_bytes,
        "kernels_per_step": count.cost.kernels, "cudagraph_batch": graph, "max_cudagraph_capture_size": sizes[-1] if sizes else 0,
        "prompt_tokens": max_model_len, "prefill_chunks": len(chunks), "time_to_first_token_s": round(ttft, 6),
        "prefill_tokens_per_second": round(max_model_len / ttft, 1) if ttft else None, "prefill_flops": prefill_flops,
        "bandwidth_bytes_s": step.bandwidth_bytes_s, "peak_flops": step.peak_flops,
        "communication": None if not transfers else {
            "link": link, "link_bytes_s": rate, "achievable_link_bytes_s": rate * LINK_FRACTION if rate else None,
            "tensor_parallel_size": tp, "pipeline_parallel_size": pp, "decode_bus_bytes_per_step": comm_bytes,
            "decode_seconds": round(comm_s, 6), "prefill_seconds": round(prefill_comm, 6),
            "transfers": [t.to_dict() for t in transfers]},
        "measured_error": None,
    }
    launch = (f"CUDA graph of batch {graph} (vLLM's capture sizes up to {sizes[-1]}) hides the launches" if graph is not None
              else f"batch {concurrency} is larger than vLLM's largest CUDA graph ({sizes[-1] if sizes else 0}): launched eagerly")
    comm_words = "" if not transfers or rate is None else (
        f"; plus {comm_bytes:,} bytes a step over {link} ({rate / 1e9:,.1f} GB/s a direction x {LINK_FRACTION:g} achievable) "
        f"for tensor parallel {tp} x pipeline parallel {pp}: {comm_s * 1e3:,.3f} ms a step")
    note = (f"speed on {hardware.name} (vLLM, modelled): decode {tokens_s:,.1f} tokens/s summed over {concurrency:,} concurrent "
            f"sequences at context {context:,} ({1 / decode_s:,.2f} tokens/s each, a step {decode_s * 1e3:,.2f} ms); a step reads "
            f"{count.cost.bytes_moved:,} bytes (weights {count.weight_bytes:,} once for the batch, KV {count.kv_read_bytes:,}) and "
            f"does {count.cost.flops:,} FLOPs at {step.bandwidth_bytes_s / 1e9:,.0f} GB/s and {step.peak_flops / 1e12:,.1f} TFLOP/s "
            f"achievable; {launch}{comm_words}; time to first token {ttft:,.3f} s for a prompt of {max_model_len:,} tokens "
            f"({len(chunks)} chunk(s) of {max_num_batched_tokens:,}, {prefill_flops:,} FLOPs); its error is not measured "
            "(no public vLLM runs are compared here; docs/speed.md)")
    return out, note
