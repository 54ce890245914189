"""Which layers llama.cpp puts on one GPU for ``--n-gpu-layers K``, and the largest K that fits a capacity.

llama.cpp numbers the repeating layers ``0..n_layer-1`` and the output layer ``n_layer``; with
``K`` GPU layers, layers ``n_layer + 1 - K`` and up go to the GPU (``llama_model::load_tensors``:
``i_gpu_start = max(n_layer + 1 - K, 0)``), so ``K = n_layer + 1`` (or ``-1``) offloads everything;
the input layer (token embeddings) always stays on the CPU. A layer's KV cache lives where the
layer does (``offload_kqv``, on by default). The GPU holds its layers as ggml-cuda allocates them
(:func:`~estimator.gguf.weights.cuda_bytes`), their KV cache and, from one GPU layer on, the
compute buffer; the CPU holds the rest and the output (logits) buffer.
"""

from __future__ import annotations

from dataclasses import dataclass

from estimator.gguf.compute import Buffers
from estimator.gguf.kv_cache import KVCache
from estimator.gguf.weights import Weights


@dataclass(frozen=True)
class Split:
    """``n_gpu_layers`` of ``n_offloadable`` (``n_layer + 1``) on the GPU, and the bytes on each side."""

    n_gpu_layers: int
    n_offloadable: int
    gpu_bytes: int
    cpu_bytes: int

    def to_dict(self) -> dict[str, int]:
        return {"n_gpu_layers": self.n_gpu_layers, "n_offloadable": self.n_offloadable, "gpu_bytes": self.gpu_bytes, "cpu_bytes": self.cpu_bytes}


def split(w: Weights, kv: KVCache, bufs: Buffers, n_gpu_layers: int) -> Split:
    """The bytes on the GPU and on the CPU with ``n_gpu_layers`` (-1: all) offloaded."""
    n_layer = len(w.layers)
    k = n_layer + 1 if n_gpu_layers < 0 else min(n_gpu_layers, n_layer + 1)
    start = n_layer + 1 - k
    gpu = cpu = 0
    for il in range(n_layer):
        if il >= start:
            gpu += w.layers_cuda[il] + kv.layers[il]
        else:
            cpu += w.layers[il] + kv.layers[il]
    if k > n_layer:
        gpu += w.output_cuda
    else:
        cpu += w.output
    cpu += w.input + bufs.output
    if k > 0:
        gpu += bufs.compute
    else:
        cpu += bufs.compute
    return Split(n_gpu_layers=k, n_offloadable=n_layer + 1, gpu_bytes=gpu, cpu_bytes=cpu)


def fit(w: Weights, kv: KVCache, bufs: Buffers, capacity_bytes: int) -> Split:
    """The split with the most GPU layers whose GPU bytes are at most ``capacity_bytes`` (0 layers if none fits)."""
    best = split(w, kv, bufs, 0)
    for k in range(1, len(w.layers) + 2):
        candidate = split(w, kv, bufs, k)
        if candidate.gpu_bytes > capacity_bytes:
            break
        best = candidate
    return best
