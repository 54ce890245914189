"""A GGUF model on several GPUs of one kind, as llama.cpp places it by default: what each GPU holds.

llama.cpp's default ``--split-mode layer`` gives each GPU whole layers (``llama_model::load_tensors``, recent
``src/llama-model.cpp``): with no ``--tensor-split`` the split points are each device's free memory, summed and
normalised (``// default split, by free memory``; GPUs of one kind: equal shares), and layer ``il`` of
``0..n_layer`` (``n_layer`` is the output layer) goes to device ``upper_bound(splits, float(il - i_gpu_start) /
act_gpu_layers)``, in float arithmetic, with ``i_gpu_start = max(n_layer + 1 - n_gpu_layers, 0)`` and
``act_gpu_layers = min(n_gpu_layers, n_layer + 1)``. So the output layer is placed like a layer, on the last GPU,
not on the main one; the input layer (token embeddings) stays on the CPU. Each GPU holds its layers' weights as
ggml-cuda allocates them (:func:`~estimator.gguf.weights.cuda_bytes`) and their KV cache (a layer's cache lives on
its device, ``offload_kqv``), and a compute buffer for the part of the graph it runs.

The compute buffer: with one GPU, :func:`estimator.gguf.compute.buffers`' figure. With more, every layer on a GPU,
llama.cpp enables pipeline parallelism (``llama_context``: more than one device, ``n_gpu_layers > n_layer``,
layer split, ``offload_kqv``, no tensor overrides, devices with async compute and events, as CUDA has), and
``ggml_backend_sched`` then keeps ``n_copies = GGML_SCHED_MAX_COPIES`` (4, ggml's default) copies of every input of
each device's graph split as leaves allocated first (``ggml_backend_sched_split_graph``: "add input copies as leafs
so that they are allocated first"), held for the whole graph. A GPU's split inputs are the graph inputs its layers
read (positions, the KV row indices and mask, the rotations of a quantized cache; the output row ids on the GPU of
the last layer) and the residual stream from the device before it (``n_embd`` floats per token, as the embeddings
input): :func:`~estimator.gguf.compute.graph_parts`' inputs less the token ids (read by the input layer, on the CPU).
So each GPU's buffer is the single-GPU graph's high-water mark through the layers (the inputs counted once in it),
through the output on the output layer's GPU, plus ``n_copies - 1`` more copies of its split inputs. This extends the
single-GPU model (checked against llama.cpp on CPU, ``bench/gguf_llamacpp.py``) by ggml's copy rule read from its
source; it is not measured on several GPUs here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from estimator.gguf import compute, kv_cache

__all__ = ["N_COPIES", "DeviceShare", "LayerSplit", "layer_devices", "layer_split"]

N_COPIES = 4  # GGML_SCHED_MAX_COPIES (ggml/CMakeLists.txt default): ggml_backend_sched's copies under pipeline parallelism


@dataclass(frozen=True)
class DeviceShare:
    """What one GPU holds: its layers (``blk`` indices; ``output`` when the output layer is there) and their bytes."""

    device: int
    layers: tuple[int, ...]
    output: bool
    weights_bytes: int
    kv_bytes: int
    compute_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.kv_bytes + self.compute_bytes

    def describe(self) -> str:
        """``"layers 0-15"``, ``"layers 16-31 + output"``, ``"output"``."""
        span = f"layers {self.layers[0]}-{self.layers[-1]}" if len(self.layers) > 1 else f"layer {self.layers[0]}" if self.layers else ""
        return " + ".join(part for part in (span, "output" if self.output else "") if part) or "nothing"

    def to_dict(self) -> dict[str, Any]:
        return {"device": self.device, "layers": self.describe(), "weights_bytes": self.weights_bytes, "kv_bytes": self.kv_bytes,
                "compute_bytes": self.compute_bytes, "total_bytes": self.total_bytes}


@dataclass(frozen=True)
class LayerSplit:
    """Every layer on ``len(devices)`` GPUs: each GPU's share, the CPU's bytes, whether pipeline parallelism is on."""

    devices: tuple[DeviceShare, ...]
    cpu_bytes: int
    pipeline_parallel: bool

    @property
    def fullest(self) -> DeviceShare:
        return max(self.devices, key=lambda d: (d.total_bytes, -d.device))


def layer_devices(n_layer: int, n_gpus: int, n_gpu_layers: int | None = None) -> list[int | None]:
    """The device of each layer ``0..n_layer`` (the last is the output layer; ``None``: the CPU) over ``n_gpus`` GPUs
    with equal free memory, as ``llama_model::load_tensors`` computes it in float arithmetic."""
    k = n_layer + 1 if n_gpu_layers is None or n_gpu_layers < 0 else n_gpu_layers
    free = np.ones(n_gpus, dtype=np.float32)
    splits = np.cumsum(free, dtype=np.float32) / np.float32(free.sum(dtype=np.float32))
    start = max(n_layer + 1 - k, 0)
    active = min(k, n_layer + 1)
    found: list[int | None] = []
    for il in range(n_layer + 1):
        if il < start or il - start >= active:
            found.append(None)
            continue
        where = np.float32(il - start) / np.float32(active)
        found.append(int(np.searchsorted(splits, where, side="right")))
    return found


def layer_split(plan: Any, n_gpus: int) -> LayerSplit:
    """Every layer of ``plan`` (an :class:`estimator.gguf.placement.Plan`) on ``n_gpus`` GPUs of one kind, at its context."""
    hp, w = plan.hp, plan.w
    kv = kv_cache.kv_cache(hp, plan.n_ctx, type_k=plan.type_k, type_v=plan.type_v, flash_attn=plan.flash_attn)
    parts = compute.graph_parts(hp, kv, flash_attn=plan.flash_attn, type_k=plan.type_k, type_v=plan.type_v)
    bufs = compute.buffers(hp, kv, flash_attn=plan.flash_attn, type_k=plan.type_k, type_v=plan.type_v)
    n_layer = len(w.layers)
    where = layer_devices(n_layer, n_gpus)
    pipeline = n_gpus > 1
    shares = []
    for device in range(n_gpus):
        layers = tuple(il for il in range(n_layer) if where[il] == device)
        output = where[n_layer] == device
        weights = sum(w.layers_cuda[il] for il in layers) + (w.output_cuda if output else 0)
        kv_bytes = sum(kv.layers[il] for il in layers)
        if not pipeline:
            held = bufs.compute
        elif layers or output:
            base = max(parts.layers if layers else 0, parts.output if output else 0)
            last = n_layer - 1 in layers
            split_inputs = parts.inputs - 4 * parts.n_tokens - (0 if last else 4 * parts.n_tokens)  # less token ids, out ids
            held = base + (N_COPIES - 1) * split_inputs
        else:
            held = 0
        shares.append(DeviceShare(device, layers, output, weights, kv_bytes, held))
    return LayerSplit(devices=tuple(shares), cpu_bytes=w.input + bufs.output, pipeline_parallel=pipeline)
