"""The communication several GPUs' plans imply: how many bytes cross the links per step, and how long that takes.

Collectives are NCCL's ring algorithms (what NCCL runs inside one node without NVLink SHARP; vLLM's custom
all-reduce for small tensor-parallel messages is a one-shot kernel over the same links and is not modelled apart):

- **all-reduce** of ``m`` bytes over ``n`` GPUs: each GPU sends and receives ``2 x (n - 1) / n x m`` bytes (the
  "bus bytes" of nccl-tests, doc/PERFORMANCE.md: ``busBw = algBw x 2(n-1)/n``);
- **reduce-scatter** and **all-gather**: ``(n - 1) / n x m`` each;
- **point-to-point** (a pipeline stage handing its activations to the next): ``m`` once.

Time = NCCL's latency + bus bytes / (the link's bytes/s in one direction x :data:`LINK_FRACTION`). The latency is
NCCL's own tuning model (``src/graph/tuning.cc``, ``ncclTopoTuneModel``): the ring's base latency of the LL protocol
(:data:`RING_BASE_LATENCY_S`, 3.6 us) plus, for each of the ring's steps (``2 x (n - 1)`` for an all-reduce,
``n - 1`` for a reduce-scatter or all-gather, 1 for a send), the link's hop latency (:data:`HOP_LATENCY_S`: NVLink
0.47 us, PCIe 1.0 us). Which link: NVLink (``Hardware.gpu_link_bytes_s``) where the machine has it and it joins at
least the GPUs asked (8 on an HGX board's NVSwitch, 2 for a bridge), else the PCIe slot (``Hardware.pcie_bytes_s``).

Tensor parallelism (Megatron-LM's split, as vLLM's ``ColumnParallelLinear`` / ``RowParallelLinear`` run it): two
all-reduces per decoder layer (after the attention's output projection and after the MLP's down projection), each of
``tokens x hidden_size x activation bytes``, plus one for the vocabulary-parallel input embedding and a gather of the
logits (``tokens x vocab x activation bytes``) for the sampler. Pipeline parallelism: each stage boundary sends the
hidden states and the residual (vLLM's ``IntermediateTensors``: 2 x ``tokens x hidden_size x activation bytes``).
Data parallel training (DDP): one all-reduce of every trainable parameter's gradient per step; FSDP (ZeRO-3): an
all-gather of the parameters for the forward, another for the backward, and a reduce-scatter of the gradients.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from estimator.speed.hardware import Hardware

__all__ = ["HOP_LATENCY_S", "LINK_FRACTION", "RING_BASE_LATENCY_S", "Collective", "Link", "Transfer", "collective_seconds",
           "data_parallel_answer", "data_parallel_transfers", "link_for", "pipeline_transfers", "tensor_parallel_transfers"]

LINK_FRACTION = 0.80
"""Share of a link's stated bytes/s (one direction) NCCL's kernels move. NVIDIA's NCCL maintainer (S. Jeaugey,
github.com/NVIDIA/nccl-tests/issues/149, 2023): an NVLink's 25 GB/s line rate "converts to ~20GB/s effective bandwidth
with a 128B payload size" (SMs write 128-byte payloads), 0.80, and A100's 12 links reach ~230 of 300 GB/s (0.77); the
same (nccl-tests/issues/212, 2024): H100's 450 GB/s line rate gives "an effective NVLink bandwidth of 370GB/s" with
NCCL's ring, 0.82. PCIe: no NVIDIA figure is cited here; the same SM payload limit is assumed, so the same 0.80."""

RING_BASE_LATENCY_S = 3.6e-6
"""NCCL's base latency of a ring collective with the LL protocol (small messages): ``baseLat[Ring][LL] = 3.6`` us in
NCCL's tuning model (github.com/NVIDIA/nccl, ``src/graph/tuning.cc``)."""


class Link(str, Enum):
    """The wire a collective crosses."""

    NVLINK = "nvlink"
    PCIE = "pcie"


HOP_LATENCY_S: dict[Link, float] = {Link.NVLINK: 0.47e-6, Link.PCIE: 1.0e-6}
"""Per ring step, NCCL's hardware latency of the LL protocol (``hwLat[NVLINK|PCI][Ring][LL]`` = 0.47 / 1.0 us in
``src/graph/tuning.cc``)."""


class Collective(str, Enum):
    ALL_REDUCE = "all_reduce"
    REDUCE_SCATTER = "reduce_scatter"
    ALL_GATHER = "all_gather"
    SEND = "send"


def bus_bytes(kind: Collective, message: int, gpus: int) -> int:
    """Bytes each GPU sends (and receives) for one collective of ``message`` bytes over ``gpus`` GPUs (ring)."""
    if gpus <= 1:
        return 0
    if kind is Collective.ALL_REDUCE:
        return 2 * (gpus - 1) * message // gpus
    if kind in (Collective.REDUCE_SCATTER, Collective.ALL_GATHER):
        return (gpus - 1) * message // gpus
    return message


def _steps(kind: Collective, gpus: int) -> int:
    return {Collective.ALL_REDUCE: 2 * (gpus - 1), Collective.REDUCE_SCATTER: gpus - 1, Collective.ALL_GATHER: gpus - 1}.get(kind, 1)


def link_for(hardware: Hardware, gpus: int) -> tuple[Link, float] | None:
    """The link ``gpus`` GPUs of ``hardware`` talk over and its bytes/s in one direction (None: the table states none)."""
    if hardware.gpu_link_bytes_s and hardware.gpu_link_gpus and gpus <= hardware.gpu_link_gpus:
        return Link.NVLINK, hardware.gpu_link_bytes_s
    if hardware.pcie_bytes_s:
        return Link.PCIE, hardware.pcie_bytes_s
    return None


def collective_seconds(kind: Collective, message: int, gpus: int, link: Link, link_bytes_s: float) -> float:
    """NCCL's latency plus the bus bytes at the achievable link rate (module docstring)."""
    if gpus <= 1:
        return 0.0
    latency = RING_BASE_LATENCY_S + _steps(kind, gpus) * HOP_LATENCY_S[link]
    return latency + bus_bytes(kind, message, gpus) / (link_bytes_s * LINK_FRACTION)


@dataclass(frozen=True)
class Transfer:
    """``count`` collectives of one kind and message size in one step."""

    what: str
    kind: Collective
    message_bytes: int
    count: int
    gpus: int

    @property
    def bus_bytes(self) -> int:
        return self.count * bus_bytes(self.kind, self.message_bytes, self.gpus)

    def seconds(self, link: Link, link_bytes_s: float) -> float:
        return self.count * collective_seconds(self.kind, self.message_bytes, self.gpus, link, link_bytes_s)

    def to_dict(self) -> dict[str, object]:
        return {"what": self.what, "kind": self.kind.value, "message_bytes": self.message_bytes, "count": self.count,
                "gpus": self.gpus, "bus_bytes": self.bus_bytes}


def tensor_parallel_transfers(*, tokens: int, hidden: int, layers: int, vocab: int, act_bytes: int, tp: int) -> tuple[Transfer, ...]:
    """A forward of ``tokens`` tokens through ``layers`` decoder layers split ``tp`` ways: two all-reduces a layer, one
    for the vocabulary-parallel embedding, and the logits gathered for the sampler (module docstring)."""
    if tp <= 1:
        return ()
    row = tokens * hidden * act_bytes
    return (Transfer("decoder layers (attention output and MLP down projections)", Collective.ALL_REDUCE, row, 2 * layers, tp),
            Transfer("vocabulary-parallel embedding", Collective.ALL_REDUCE, row, 1, tp),
            Transfer("logits gathered for the sampler", Collective.ALL_GATHER, tokens * vocab * act_bytes, 1, tp))


def pipeline_transfers(*, tokens: int, hidden: int, act_bytes: int, pp: int) -> tuple[Transfer, ...]:
    """The hidden states and the residual sent across each of the ``pp - 1`` stage boundaries."""
    if pp <= 1:
        return ()
    return (Transfer("pipeline stage boundaries (hidden states and residual)", Collective.SEND, 2 * tokens * hidden * act_bytes, pp - 1, 2),)


def data_parallel_transfers(*, trainable_bytes: int, param_bytes: int, gpus: int, sharded: bool) -> tuple[Transfer, ...]:
    """One training step's gradient synchronisation over ``gpus`` data-parallel GPUs: DDP's all-reduce of the gradients
    (``trainable_bytes``, in the gradients' dtype), or FSDP's two all-gathers of the parameters (``param_bytes``) and a
    reduce-scatter of the gradients."""
    if gpus <= 1:
        return ()
    if not sharded:
        return (Transfer("gradients (DDP all-reduce)", Collective.ALL_REDUCE, trainable_bytes, 1, gpus),)
    return (Transfer("parameters gathered for the forward and the backward (FSDP)", Collective.ALL_GATHER, param_bytes, 2, gpus),
            Transfer("gradients (FSDP reduce-scatter)", Collective.REDUCE_SCATTER, trainable_bytes, 1, gpus))


_SHARDED = {"zero3": True, "fsdp": True, "ddp": False, "zero1": False, "zero2": False}


def data_parallel_answer(*, weights_bytes: int, gpus: int, strategy: str, hardware: Hardware) -> tuple[dict[str, object] | None, str]:
    """The gradient synchronisation of one full fine-tuning step over ``gpus`` GPUs of one node (``rows[].speed`` of a
    ``--strategy`` training row, ``engine: "transformers"``): the bytes each GPU moves and the time on the node's link.

    ``weights_bytes``: the row's weights (its dtype); the gradients are as large (the same dtype). DDP all-reduces them;
    ZeRO-1/2 reduce-scatter them and all-gather the updated shards, the same bus bytes as an all-reduce (ZeRO, Rajbhandari
    et al. 2020, section 7: "the same communication volume as baseline data parallelism"); ZeRO-3/FSDP all-gather the
    parameters for the forward and the backward and reduce-scatter the gradients (1.5 x). The step's compute is not
    modelled under a strategy (its per-op costs are not traced per GPU yet); the note says so."""
    if strategy not in _SHARDED:
        return None, f"no speed: the {strategy} strategy's communication (activations) is not modelled yet"
    link = link_for(hardware, gpus)
    if link is None:
        return None, f"no speed: {hardware.name} states no link between GPUs in the hardware table"
    kind, rate = link
    if strategy in ("zero1", "zero2"):
        transfers: tuple[Transfer, ...] = (
            Transfer("gradients (ZeRO reduce-scatter)", Collective.REDUCE_SCATTER, weights_bytes, 1, gpus),
            Transfer("updated parameters (ZeRO all-gather)", Collective.ALL_GATHER, weights_bytes, 1, gpus))
    else:
        transfers = data_parallel_transfers(trainable_bytes=weights_bytes, param_bytes=weights_bytes, gpus=gpus, sharded=_SHARDED[strategy])
    seconds = sum(t.seconds(kind, rate) for t in transfers)
    moved = sum(t.bus_bytes for t in transfers)
    answer: dict[str, object] = {
        "engine": "transformers", "hardware": hardware.name, "label": "roofline", "measured_error": None,
        "communication": {"link": kind.value, "link_bytes_s": rate, "achievable_link_bytes_s": rate * LINK_FRACTION,
                          "strategy": strategy, "gpus": gpus, "step_bus_bytes": moved, "step_seconds": round(seconds, 6),
                          "transfers": [t.to_dict() for t in transfers]}}
    note = (f"speed on {hardware.name} (transformers, roofline): {strategy} over {gpus} GPUs moves {moved:,} bytes a GPU a step "
            f"over {kind.value} ({rate / 1e9:,.1f} GB/s a direction x {LINK_FRACTION:g} achievable): {seconds * 1e3:,.1f} ms of "
            "communication a step (NCCL ring; overlapped with the backward where the framework buckets it); the step's compute "
            "under a strategy is not modelled yet; error not measured (docs/speed.md)")
    return answer, note
