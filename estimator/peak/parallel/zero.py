"""Model states per GPU under DDP and DeepSpeed ZeRO-1/2/3, with and without CPU offload.

Small pure functions over parameter counts: what a rank holds of the parameters, gradients and
optimizer states, and what an offload moves to CPU memory. They are formulas because DeepSpeed's
engine cannot run on fake tensors (it flattens and partitions real storages, and its estimator
needs the real model: ``model_to_params`` deduplicates by ``data_ptr``). Sources:

- ZeRO's partitioning: Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion
  Parameter Models" (SC 2020), Figure 1: stage 1 partitions the optimizer states, stage 2 also the
  gradients, stage 3 also the parameters, each over the ``N`` data-parallel ranks.
- The bytes per parameter and the ZeRO-3 live layer: DeepSpeed's own estimators,
  ``deepspeed/runtime/zero/stage_1_and_2.py`` ``estimate_zero2_model_states_mem_needs`` and
  ``deepspeed/runtime/zero/stage3.py`` ``estimate_zero3_model_states_mem_needs`` (0.19.8): with a
  16-bit run and Adam, 2 bytes of 16-bit parameters, and 18 bytes partitioned: 2 of 16-bit
  gradients, 4 of float32 gradients, 4 of float32 master parameters, 8 of Adam's two moments;
  ZeRO-3 holds ``4 * largest_layer_params`` (its 16-bit parameters and gradients) gathered, and
  its estimate counts 18 bytes per parameter partitioned *in all* (16-bit parameters included:
  2 fewer than 2 + 18; stage 3 makes its float32 gradients per sub-group at the step, so half
  of their 4 bytes is what the figure keeps); we follow DeepSpeed's figure.
  The CPU figures are DeepSpeed's too (:func:`deepspeed_cpu_bytes`): its estimate of the host
  memory each node needs, with its ``additional_buffer_factor`` of 1.5.
- DDP: every rank holds the whole model, its gradients and its optimizer states, plus the
  Reducer's gradient buckets (``torch/nn/parallel/distributed.py``: ``bucket_cap_mb=25``, a first
  bucket of 1 MiB, ``gradient_as_bucket_view=False``: the bucket contents are a second copy of the
  gradients, :func:`ddp_bucket_bytes`).
- ZeRO-1 is not in DeepSpeed's estimators: the paper's stage 1 (optimizer states partitioned,
  gradients and parameters whole) with DeepSpeed's byte counts.

``tests/test_parallel_zero.py`` checks :func:`zero_model_states` against DeepSpeed's own two
functions for published configs, 1 to 64 GPUs, offload on and off.

Where we deliberately differ from DeepSpeed's figures in the rows we report: activations, the
step's temporaries and the inputs of the local micro-batch come from the simulated step (DeepSpeed
counts model states only); buffers (rotary tables) are added on every rank; tied embeddings are
one parameter (DeepSpeed counts them once too, by ``data_ptr``), an untied head is its own
parameter, so the "largest layer" we use for the live ZeRO-3 unit is the largest *transformer
block or top-level module* (what ZeRO-3 gathers through its module hooks and prefetch), not
DeepSpeed's largest module's own direct parameters, which for a decoder is the embedding or the
head alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = [
    "DEEPSPEED_MIXED_ADAM",
    "ModelStates",
    "Offload",
    "StateBytes",
    "Strategy",
    "ddp_bucket_bytes",
    "deepspeed_cpu_bytes",
    "zero_model_states",
]

Strategy = Literal["ddp", "zero1", "zero2", "zero3"]
Offload = Literal["none", "optimizer", "optimizer+params"]


@dataclass(frozen=True)
class StateBytes:
    """Bytes per trainable parameter of each model state.

    ``params``: the copy the forward uses (2 for 16-bit); ``grads``: its gradient; ``master``: a
    float32 master copy the optimizer updates (0 where the parameters are their own master);
    ``grad_fp32``: the float32 gradient partition the optimizer reads (DeepSpeed's mixed
    precision; 0 otherwise); ``optimizer``: the optimizer's states (8 for Adam's two float32 moments).
    """

    params: int
    grads: int
    master: int
    grad_fp32: int
    optimizer: int

    @property
    def partitioned(self) -> int:
        """What ZeRO-2/3 partition besides the parameters: gradients, master, float32 gradients, states."""
        return self.grads + self.master + self.grad_fp32 + self.optimizer


# DeepSpeed's 16-bit training with Adam: 2 + (2 + 4 + 4 + 8) bytes per parameter (stage_1_and_2.py).
DEEPSPEED_MIXED_ADAM = StateBytes(params=2, grads=2, master=4, grad_fp32=4, optimizer=8)


@dataclass(frozen=True)
class ModelStates:
    """Bytes of model states one GPU holds, by component, and the host memory an offload needs."""

    weights: int
    gradients: int
    optimizer_states: int
    cpu_bytes: int

    @property
    def gpu_bytes(self) -> int:
        return self.weights + self.gradients + self.optimizer_states


def _split(s: StateBytes, params: int, n: int) -> tuple[int, int]:
    """Partitioned gradients and optimizer side, rounded as DeepSpeed rounds their sum (``int(18 * P / N)``)."""
    opt = int((s.master + s.grad_fp32 + s.optimizer) * params / n)
    return int(s.partitioned * params / n) - opt, opt


def zero_model_states(
    strategy: Strategy, params: int, *, gpus_per_node: int = 1, nodes: int = 1, offload: Offload = "none",
    largest_layer_params: int = 0, state: StateBytes = DEEPSPEED_MIXED_ADAM, cpu: Literal["deepspeed"] | None = "deepspeed",
) -> ModelStates:
    """Model states per GPU for ``params`` trainable parameters over ``gpus_per_node * nodes`` ranks.

    DDP: everything whole (``offload`` must be ``"none"``). ZeRO-1: optimizer states, master and
    float32 gradients partitioned; 16-bit parameters and gradients whole. ZeRO-2: all but the
    16-bit parameters partitioned (DeepSpeed: ``2P + 18P/N``). ZeRO-3: everything partitioned, plus
    the live layer, ``(params + grads) * largest_layer_params`` (DeepSpeed: ``4 * largest``).
    ``offload="optimizer"`` (ZeRO-Offload) moves the partitioned master, float32 gradients and
    states to CPU (ZeRO-2 then keeps the 16-bit parameters only, as DeepSpeed's estimate does);
    ``"optimizer+params"`` (ZeRO-Infinity, stage 3 only) the 16-bit parameter partitions too.
    Divisions round as DeepSpeed's (``int(18 * P / N)``). ``cpu_bytes`` is DeepSpeed's own host
    estimate (:func:`deepspeed_cpu_bytes`) when ``cpu="deepspeed"``, else 0.
    """
    n = gpus_per_node * nodes
    if n < 1 or params < 0:
        raise ValueError("gpus and params must be positive")
    if strategy == "ddp" and offload != "none":
        raise ValueError("DDP has no offload")
    if offload == "optimizer+params" and strategy != "zero3":
        raise ValueError("parameter offload is ZeRO-3 only")
    s = state
    fp32 = s.master + s.grad_fp32 + s.optimizer  # what the optimizer side holds per parameter
    if strategy == "ddp":
        weights, grads, opt = (s.params + s.master) * params, (s.grads + s.grad_fp32) * params, s.optimizer * params
    elif strategy == "zero1":
        weights, grads = s.params * params, s.grads * params
        shard = int(fp32 * params / n)
        opt = 0 if offload != "none" else shard
    elif strategy == "zero2":
        weights = s.params * params
        if offload != "none":  # DeepSpeed: gpu_mem = 2 * total_params
            grads = opt = 0
        else:
            grads, opt = _split(s, params, n)
    elif strategy == "zero3":
        live = (s.params + s.grads) * largest_layer_params
        if offload == "optimizer+params":
            weights, grads, opt = live, 0, 0
        elif offload == "optimizer":
            weights, grads, opt = live + int(s.params * params / n), 0, 0
        else:  # DeepSpeed's stage-3 estimate: int(18 * P / N) for everything partitioned, 16-bit parameters included
            total = int((s.params + s.grads + s.master + s.optimizer + s.grad_fp32 // 2) * params / n)
            weights_part = int(s.params * params / n)
            grads = int(s.grads * params / n)
            weights, opt = live + weights_part, total - weights_part - grads
    else:
        raise ValueError(f"unknown strategy {strategy!r}")
    cpu_bytes = deepspeed_cpu_bytes(strategy, params, gpus_per_node=gpus_per_node, nodes=nodes, offload=offload,
                                    largest_layer_params=largest_layer_params) if cpu == "deepspeed" else 0
    return ModelStates(weights, grads, opt, cpu_bytes)


def deepspeed_cpu_bytes(
    strategy: Strategy, params: int, *, gpus_per_node: int = 1, nodes: int = 1, offload: Offload = "none",
    largest_layer_params: int = 0, additional_buffer_factor: float = 1.5,
) -> int:
    """Host memory per node, as DeepSpeed estimates it (``zero_init=True``, ZeRO-3's default).

    ZeRO-2 (``stage_1_and_2.py``): offloaded ``P * max(4 * gpus, 16) * 1.5`` (its ``total_gpus``),
    else ``P * 4 * gpus_per_node * 1.5`` (each process loads the float32 model on the host).
    ZeRO-3 (``stage3.py``, ``zero_init=True``): offloading parameters ``P * 18 / nodes * 1.5``,
    the optimizer only ``P * 16 / nodes * 1.5``, nothing offloaded ``largest * 4 * gpus_per_node * 1.5``.
    DDP and ZeRO-1 use ZeRO-2's figure (stage 1 and 2 share DeepSpeed's code and its estimate).
    """
    total = gpus_per_node * nodes
    f = additional_buffer_factor
    if strategy == "zero3":
        if offload == "optimizer+params":
            return int(params * 18 * (1 / nodes) * f)
        if offload == "optimizer":
            return int(params * 16 * (1 / nodes) * f)
        return int(largest_layer_params * 4 * gpus_per_node * f)
    if offload != "none":
        return int(params * max(4 * total, 16) * f)
    return int(params * 4 * gpus_per_node * f)


def ddp_bucket_bytes(grad_sizes: list[int]) -> int:
    """Bytes of DDP's gradient buckets: with ``gradient_as_bucket_view=False`` (the default) the
    Reducer allocates one flat tensor per bucket, so together they are as large as every gradient
    (``grad_sizes`` in bytes). The bucket caps (``bucket_cap_mb=25``, a 1 MiB first bucket) only
    change how the gradients are grouped, not the total, so they are not parameters."""
    return sum(grad_sizes)

