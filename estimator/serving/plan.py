"""A vLLM-style memory plan for serving a model on one GPU: the budget, the KV-cache blocks, the concurrency.

Pure arithmetic over figures computed elsewhere (the weights, the simulated profile-run peak, the KV
layout of :mod:`estimator.serving.kv`); each step is vLLM V1's own rule, cited where it is applied:

1. **Budget** (``vllm/v1/worker/gpu_worker.py``, ``Worker.determine_available_memory``):
   ``requested = total_memory x gpu_memory_utilization`` and
   ``KV cache = requested - (weights + profile-run torch peak increase + non-torch increase)
   - CUDA-graph estimate``. The CUDA-graph estimate is subtracted only with
   ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1`` (default 0, ``vllm/envs.py``): by default the
   graphs are captured after the KV cache is allocated, out of the ``1 - utilization`` share.
2. **Blocks** (``vllm/v1/core/kv_cache_utils.py``): a block holds ``block_size`` tokens of one layer
   (``page_size_bytes``: ``block_size x bytes per token of the layer``). Layers of one kind (full,
   sliding of one window, MLA) are one group; a model with several kinds is split into groups of
   ``group_size = min(layers per kind)`` layers (``_get_kv_cache_config_uniform_page_size``), and
   ``num_blocks = available // page_size // group_size`` (``get_num_blocks``; one kind: ``group_size`` is
   the number of layers). "GPU KV cache size" in tokens is ``num_blocks // groups x block_size``.
3. **Maximum concurrency** (``get_max_concurrency_for_kv_cache_config``): ``num_blocks`` over the blocks
   one request of ``max_model_len`` tokens takes in every group: ``cdiv(max_model_len, block_size)``
   for full attention and MLA, ``cdiv(min(window - 1 + max_num_batched_tokens, max_model_len),
   block_size) + 1`` for a sliding window (``SlidingWindowSpec.max_memory_usage_bytes``).
4. **Recurrent layers** (Mamba, gated DeltaNet, short convolutions: :mod:`estimator.serving.states`):
   one ``MambaSpec`` block holds a request's whole state of a layer, and a request takes one block per
   recurrent group (``mamba_cache_mode`` "none": vLLM keeps prefix caching off for hybrid models by
   default, and ``mamba_block_size`` is then ``max_model_len``). All pages must be one size:
   ``HybridAttentionMambaModelConfig.verify_and_update_config`` raises the attention block size to
   ``16 x cdiv(state page, 16 x attention bytes per token)`` (16: the attention kernels' block
   alignment) where ``block_size`` is smaller, and pads the state page to the attention page
   (``mamba_page_size_padded``). A model of recurrent layers only keeps its unpadded pages.
5. **Defaults** (``vllm/engine/arg_utils.py``, ``EngineArgs.get_batch_defaults``, ``vllm serve``):
   ``max_num_batched_tokens`` 8192 and ``max_num_seqs`` 1024 on a GPU of at least 70 GiB whose name
   has no "a100", else 2048 and 256.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from estimator.errors import UnsupportedError
from estimator.serving.kv import KVLayer, KVLayout

__all__ = ["KVBlocks", "ServingPlan", "batch_defaults", "kv_blocks", "plan"]

GiB = 1024**3


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def batch_defaults(capacity_bytes: int, gpu_name: str | None) -> tuple[int, int]:
    """``(max_num_batched_tokens, max_num_seqs)`` as ``vllm serve`` sets them on this GPU."""
    if capacity_bytes >= 70 * GiB and "a100" not in (gpu_name or "").lower():
        return 8192, 1024
    return 2048, 256


@dataclass(frozen=True)
class KVGroup:
    """Layers that share a block table: one kind (and window), ``layers`` of them."""

    kind: str
    window: int | None
    layers: int
    blocks_per_request: int  # blocks of one layer a request of max_model_len tokens takes


@dataclass(frozen=True)
class KVBlocks:
    """How vLLM would lay out the KV cache in ``available_bytes``."""

    block_size: int  # tokens per attention block (raised for hybrid models: step 4); recurrent-only: max_model_len
    page_bytes: int  # one block of one layer
    group_size: int  # layers sharing a block id (one per group)
    groups: tuple[KVGroup, ...]
    num_blocks: int
    max_model_len: int
    requested_block_size: int = 0  # --block-size (0: the same as block_size)
    state_page_bytes: int = 0  # one recurrent layer's state before padding to page_bytes (0: none)

    @property
    def cache_bytes(self) -> int:
        """Bytes vLLM allocates for the blocks: one tensor of ``num_blocks`` pages per layer of a group."""
        return self.num_blocks * self.page_bytes * self.group_size

    @property
    def tokens(self) -> int:
        """vLLM's "GPU KV cache size: N tokens" (blocks per group x the smallest block size of a group)."""
        return self.num_blocks // len(self.groups) * self.block_size

    @property
    def state_blocks_per_request(self) -> int:
        """Blocks one request takes for its recurrent state (one per recurrent group)."""
        return sum(group.blocks_per_request for group in self.groups if group.kind == "mamba")

    @property
    def blocks_per_request(self) -> int:
        return sum(group.blocks_per_request for group in self.groups)

    @property
    def max_concurrency(self) -> float:
        """vLLM's "Maximum concurrency for max_model_len tokens per request"."""
        return self.num_blocks / self.blocks_per_request


def hybrid_block_size(layout: KVLayout, block_size: int) -> int:
    """The attention block size vLLM sets so that an attention page holds a recurrent layer's state (step 4)."""
    recurrent, attention = layout.recurrent, layout.attention
    if layout.hybrid is not None:  # the whole model's, whatever this pipeline stage holds
        per_token, state = layout.hybrid
    elif recurrent and attention:
        state, per_token = max(layer.state_bytes for layer in recurrent), attention[0].bytes_per_token
    else:
        return block_size
    return max(block_size, _ALIGN * cdiv(state, _ALIGN * per_token))


_ALIGN = 16  # kernel_block_alignment_size of the attention backends (non-MLA, Hopper)


def _page(layout: KVLayout, block_size: int) -> int:
    """One block of one layer: the attention page (state pages padded to it), or a recurrent-only model's state page."""
    pages = {layer.bytes_per_token * block_size for layer in layout.attention}
    if layout.hybrid is not None:
        pages.add(layout.hybrid[0] * block_size)
    if len(pages) > 1:
        raise UnsupportedError("layers with different bytes per token are not planned yet (vLLM pads their pages to one size).")
    return pages.pop() if pages else max(layer.state_bytes for layer in layout.recurrent)


def _blocks_for(layer: KVLayer, max_model_len: int, max_num_batched_tokens: int, block_size: int) -> int:
    if layer.kind == "mamba":
        return 1  # the whole state of a request in one block (mamba_block_size = max_model_len)
    if layer.window is None:
        return cdiv(max_model_len, block_size)
    return cdiv(min(layer.window - 1 + max_num_batched_tokens, max_model_len), block_size) + 1


def kv_blocks(layout: KVLayout, available_bytes: int, *, block_size: int, max_model_len: int, max_num_batched_tokens: int) -> KVBlocks:
    """The blocks vLLM's KV cache manager makes of ``available_bytes`` for ``layout``."""
    if not layout.layers:
        raise UnsupportedError("this model keeps no KV cache: there is nothing to plan for serving.")
    requested, block_size = block_size, hybrid_block_size(layout, block_size)
    page = _page(layout, block_size)
    kinds: dict[tuple[str, int | None], list[KVLayer]] = {}
    for layer in layout.layers:
        kinds.setdefault((layer.kind, layer.window), []).append(layer)
    group_size = min(len(layers) for layers in kinds.values())
    groups: list[KVGroup] = []
    for (kind, window), layers in kinds.items():
        per_request = _blocks_for(layers[0], max_model_len, max_num_batched_tokens, block_size)
        groups.extend(KVGroup(kind, window, min(group_size, len(layers) - start), per_request)
                      for start in range(0, len(layers), group_size))
    num_blocks = max(int(available_bytes // page // group_size), 0)
    state = max((layer.state_bytes for layer in layout.recurrent), default=0)
    if not layout.attention and layout.hybrid is None:  # recurrent layers only: a block (mamba_block_size) of max_model_len tokens
        block_size = max_model_len
    return KVBlocks(block_size, page, group_size, tuple(groups), num_blocks, max_model_len, requested, state)


@dataclass(frozen=True)
class ServingPlan:
    """The vLLM-style budget of one GPU; every figure in bytes unless named otherwise."""

    capacity_bytes: int
    gpu_memory_utilization: float
    weights_bytes: int
    profile_peak_bytes: int  # the profile run's torch peak above the weights (activations, inputs, logits, sampler)
    cuda_graph_bytes: int
    non_torch_bytes: int
    max_num_seqs: int
    max_num_batched_tokens: int
    kv_bytes_per_token: int
    blocks: KVBlocks
    notes: tuple[str, ...] = field(default=())
    state_layers: int = 0  # recurrent layers (their state blocks: step 4)
    conv_state_bytes: int = 0  # one request's conv states over those layers, unpadded
    ssm_state_bytes: int = 0  # one request's SSM / recurrent states over those layers, unpadded

    @property
    def requested_bytes(self) -> int:
        return int(self.capacity_bytes * self.gpu_memory_utilization)

    @property
    def available_kv_bytes(self) -> int:
        """What is left for the KV cache (negative: the model does not fit)."""
        return self.requested_bytes - self.weights_bytes - self.profile_peak_bytes - self.non_torch_bytes - self.cuda_graph_bytes

    @property
    def fits(self) -> bool:
        """At least one request of ``max_model_len`` tokens fits (else vLLM refuses to start)."""
        return self.blocks.num_blocks >= self.blocks.blocks_per_request

    def to_dict(self) -> dict[str, Any]:
        """The ``serving`` object of a row in the JSON (docs/CONTRACT.md)."""
        blocks = self.blocks
        return {
            "capacity_bytes": self.capacity_bytes,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "requested_bytes": self.requested_bytes,
            "weights_bytes": self.weights_bytes,
            "profile_peak_bytes": self.profile_peak_bytes,
            "cuda_graph_bytes": self.cuda_graph_bytes,
            "non_torch_bytes": self.non_torch_bytes,
            "available_kv_cache_bytes": self.available_kv_bytes,
            "kv_cache_bytes": blocks.cache_bytes,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "block_size": blocks.block_size,
            "requested_block_size": blocks.requested_block_size or blocks.block_size,
            "block_bytes": blocks.page_bytes * blocks.group_size,
            "kv_cache_groups": len(blocks.groups),
            "num_blocks": blocks.num_blocks,
            "kv_cache_tokens": blocks.tokens,
            "max_model_len": blocks.max_model_len,
            "max_num_seqs": self.max_num_seqs,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "blocks_per_request": blocks.blocks_per_request,
            "state_layers": self.state_layers,
            "conv_state_bytes_per_request": self.conv_state_bytes,
            "ssm_state_bytes_per_request": self.ssm_state_bytes,
            "state_bytes_per_request": self.conv_state_bytes + self.ssm_state_bytes,
            "state_page_bytes": blocks.state_page_bytes,
            "state_blocks_per_request": blocks.state_blocks_per_request,
            "max_concurrency": round(blocks.max_concurrency, 4),
            "fits": self.fits,
        }


def plan(
    layout: KVLayout, *, capacity_bytes: int, weights_bytes: int, profile_peak_bytes: int, max_model_len: int,
    max_num_seqs: int, max_num_batched_tokens: int, gpu_memory_utilization: float = 0.9, block_size: int = 16,
    cuda_graph_bytes: int = 0, non_torch_bytes: int = 0,
) -> ServingPlan:
    """The plan for ``layout`` (already in the KV cache's dtype) on a GPU of ``capacity_bytes``."""
    requested = int(capacity_bytes * gpu_memory_utilization)
    available = requested - weights_bytes - profile_peak_bytes - non_torch_bytes - cuda_graph_bytes
    blocks = kv_blocks(layout, max(available, 0), block_size=block_size, max_model_len=max_model_len,
                       max_num_batched_tokens=max_num_batched_tokens)
    notes = []
    if available <= 0:
        notes.append(f"does not fit: weights and the profile run need {weights_bytes + profile_peak_bytes:,} bytes of the "
                     f"{requested:,} bytes vLLM may use ({gpu_memory_utilization:g} of {capacity_bytes:,})")
    elif blocks.num_blocks < blocks.blocks_per_request:
        longest = estimate_max_model_len(layout, available, max_num_batched_tokens=max_num_batched_tokens, limit=max_model_len,
                                         block_size=block_size)
        notes.append(f"does not fit: one request of max_model_len {max_model_len:,} tokens needs {blocks.blocks_per_request:,} "
                     f"blocks, the KV cache has {blocks.num_blocks:,}; vLLM refuses to start (its estimated maximum model "
                     f"length here: {longest:,})")
    states = [layer.state for layer in layout.recurrent if layer.state is not None]
    return ServingPlan(capacity_bytes, gpu_memory_utilization, weights_bytes, profile_peak_bytes, cuda_graph_bytes,
                       non_torch_bytes, max_num_seqs, max_num_batched_tokens, layout.bytes_per_token, blocks, tuple(notes),
                       len(layout.recurrent), sum(s.conv_state_bytes for s in states), sum(s.ssm_state_bytes for s in states))


def _request_bytes(layout: KVLayout, max_model_len: int, max_num_batched_tokens: int, block_size: int) -> int:
    block_size = hybrid_block_size(layout, block_size)
    page = _page(layout, block_size)
    return sum(_blocks_for(layer, max_model_len, max_num_batched_tokens, block_size)
               * (page if layer.kind == "mamba" else layer.bytes_per_token * block_size) for layer in layout.layers)


def estimate_max_model_len(layout: KVLayout, available_bytes: int, *, max_num_batched_tokens: int, limit: int,
                           block_size: int = 16) -> int:
    """The longest ``max_model_len`` whose one request fits ``available_bytes`` (vLLM's ``estimate_max_model_len``,
    a binary search over ``check_enough_kv_cache_memory``'s sum of every layer's ``max_memory_usage_bytes``)."""
    low, high = 0, limit
    while low < high:
        mid = (low + high + 1) // 2
        if _request_bytes(layout, mid, max_num_batched_tokens, block_size) <= available_bytes:
            low = mid
        else:
            high = mid - 1
    return low
