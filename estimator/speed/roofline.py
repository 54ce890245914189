"""A time model you can read: per op, the larger of its compute time and its memory time (a roofline).

For each op of a :class:`~estimator.speed.cost.PhaseCost`::

    compute = flops / (peak FLOP/s of the op's dtype x FLOPS_FRACTION)
    memory  = (bytes read + bytes written) / (peak bandwidth x BANDWIDTH_FRACTION)
    op time = max(compute, memory)                                   (launch hidden: CUDA graphs)
    op time = max(compute, memory, KERNEL_FLOOR_S)                   (launch not hidden)

where an op's kernel also spends instructions beyond its FLOPs on the same ALUs (``alu_slots``: Metal's
matmuls dequantizing in-kernel), those count at one FMA slot each inside its compute time; and the
phase's time is the sum over its ops (kernels run one after another on one stream). This
is PyTorch's own roofline (``torch.distributed._tools.runtime_estimator``'s ``_roofline_estimate``:
``max(op_flops / pi, op_bytes / beta)`` per op, in nanoseconds there, seconds here), with two
changes: the peaks are the data sheets' (:mod:`estimator.speed.hardware`) scaled by the measured
fractions below instead of read from the current device, and a kernel cannot take less than its
launch interval where nothing hides the launches (batch-1 decode in eager PyTorch or llama.cpp
without CUDA graphs; vLLM's and llama.cpp's CUDA graphs hide them).

Every constant is a published measurement, none is fitted to the measured speeds the bench
compares with (``bench/speed_accuracy.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum

from estimator.speed.cost import OpCost, PhaseCost
from estimator.speed.hardware import Hardware, Kind

__all__ = ["BANDWIDTH_FRACTION", "BANDWIDTH_FRACTION_ARCH", "FLOPS_FRACTION", "KERNEL_FLOOR_S", "Label", "PhaseTime", "achievable_bandwidth", "achievable_flops",
           "op_seconds", "phase_time"]

BANDWIDTH_FRACTION: dict[Kind, float] = {Kind.GPU: 767.48 / 900, Kind.APPLE: 767.48 / 900, Kind.CPU: 0.75}
"""Share of the stated peak memory bandwidth a streaming kernel reaches.

GPU: clpeak's global-memory bandwidth test on a Tesla V100-SXM2-16GB (the run printed in the README of
github.com/jjkeijser/clpeak, a fork of krrishnarraj/clpeak: "Global memory bandwidth (GBPS) float : 767.48",
float2 810.81, float4 843.06), 767.48 of the 900 GB/s stated = 0.853: the 32-bit loads, as ggml's CUDA mat-vec
kernels read their weights (``get_int_b2`` / ``get_int_b4``, ``half2``). nvbench's 32-bit figure for an A100-40GB,
1336.62 of 1555 GB/s = 0.860 (github.com/xytpai/nvbench, README "global_memory_bandwidth", "float 1"), agrees; a
GPU measured on its own architecture takes that figure instead (:data:`BANDWIDTH_FRACTION_ARCH`). This replaces
0.83 = 750 of 900 GB/s attributed to Jia et al., "Dissecting the NVIDIA Volta GPU Architecture via
Microbenchmarking" (arXiv:1804.06826), a figure this project could not find in a copy of the paper.
Apple: the same figure is assumed (unified LPDDR5 behind the same kind of memory controller;
no microbenchmark of the GPU's bandwidth is cited here). CPU: STREAM triad (McCalpin,
https://www.cs.virginia.edu/stream/) on desktop and server DDR4/DDR5 platforms reports 70-80 % of
the JEDEC peak; 0.75 is its middle.
"""

BANDWIDTH_FRACTION_ARCH: dict[str, float] = {"8.9": 920.207 / 1008}
"""Per NVIDIA compute capability, the share a GPU of that architecture measures where a published microbenchmark
has one: Ada (8.9: RTX 40 series, L4, L40S, RTX 6000 Ada), nvbench's global-memory bandwidth on an RTX 4090 with
32-bit loads, 920.207 of the 1008 GB/s stated = 0.913 (github.com/xytpai/nvbench, README "global_memory_bandwidth",
"float 1"). Others take
:data:`BANDWIDTH_FRACTION`."""

FLOPS_FRACTION: dict[str, float] = {"nvidia": 0.80, "amd": 0.60, "apple": 0.80, "cpu": 0.80}
"""Share of the stated dense peak FLOP/s a large matmul reaches: the Maximum Achievable Matmul FLOPS
(MAMF) table of Stas Bekman's ml-engineering (compute/accelerator/README.md, "Maximum Achievable
Matmul FLOPS comparison table", BF16, mamf-finder.py): H100 SXM 792.1 of 989 TFLOPS = 0.801 (A100 SXM
0.859, A100 PCIe 0.822, GH200 0.830): 0.80 for NVIDIA; MI300X 781.9 of 1300 = 0.601: 0.60 for AMD.
Apple: P. Turner's metal-benchmarks (github.com/philipturner/metal-benchmarks, README "Operations per
Second", A15+/M1+): 102.5 matrix FFMA16 (101.7 FFMA32) per GPU core per cycle inside a matrix
multiplication kernel, of the core's 128 ALUs: 0.80. CPUs: no MAMF figure; NVIDIA's 0.80 is assumed.
"""

KERNEL_FLOOR_S = 3.8e-6
"""The least time a kernel occupies the GPU's timeline when launched one after another from the
host: NVIDIA's "Getting Started with CUDA Graphs" (A. Gray, 2019,
https://developer.nvidia.com/blog/cuda-graphs/) times 20 short kernels x 1000 steps: 9.6 us per kernel
with a stream synchronisation after each, 3.8 us launched back to back without one (2.9 us of it the
kernel itself), 3.4 us replayed from a CUDA graph (the figures as the blog gives them; checked against a
public transcription of its code and timings, as the original page could not be opened here). Where the
launches are captured in a CUDA graph the floor is not applied.
"""


class Label(str, Enum):
    """How a figure is made: ``roofline`` (the ops' own counts on the data sheet's peaks) or ``modelled``
    (a model of an engine's kernels, e.g. llama.cpp's, on top of the roofline)."""

    ROOFLINE = "roofline"
    MODELLED = "modelled"


@dataclass(frozen=True)
class PhaseTime:
    """The time of one phase and its parts: ``compute_seconds`` and ``memory_seconds`` are the sums of each
    op's compute and memory times (an op counts the larger one in ``seconds``); ``launch_seconds`` what the
    kernel floor adds; ``bandwidth_bytes_s`` and ``peak_flops`` the achievable figures used."""

    seconds: float
    compute_seconds: float
    memory_seconds: float
    launch_seconds: float
    bandwidth_bytes_s: float
    peak_flops: float
    label: Label = Label.ROOFLINE
    flops: int = 0
    bytes_moved: int = 0
    kernels: int = 0
    tokens: int = 0

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict[str, object]:
        return {"seconds": self.seconds, "compute_seconds": self.compute_seconds, "memory_seconds": self.memory_seconds,
                "launch_seconds": self.launch_seconds, "bandwidth_bytes_s": self.bandwidth_bytes_s, "peak_flops": self.peak_flops,
                "label": self.label.value, "flops": self.flops, "bytes_moved": self.bytes_moved, "kernels": self.kernels,
                "tokens": self.tokens, "tokens_per_second": self.tokens_per_second}


def achievable_bandwidth(hardware: Hardware) -> float:
    """Bytes/s a streaming kernel reaches: the stated peak x :data:`BANDWIDTH_FRACTION`, or x the architecture's own
    measured share (:data:`BANDWIDTH_FRACTION_ARCH`) for an NVIDIA GPU of an architecture that has one."""
    if hardware.kind is Kind.GPU and hardware.vendor == "nvidia" and hardware.compute_capability in BANDWIDTH_FRACTION_ARCH:
        return hardware.bandwidth_bytes_s * BANDWIDTH_FRACTION_ARCH[hardware.compute_capability]
    return hardware.bandwidth_bytes_s * BANDWIDTH_FRACTION[hardware.kind]


def achievable_flops(hardware: Hardware, dtype: str) -> float:
    """FLOP/s a large matmul of ``dtype`` reaches: the stated dense peak x :data:`FLOPS_FRACTION`."""
    return hardware.peak_flops(dtype) * FLOPS_FRACTION.get(hardware.vendor, 0.80)


def op_seconds(op: OpCost, hardware: Hardware, alu_slots: float = 0.0) -> tuple[float, float]:
    """(compute seconds, memory seconds) of one op on ``hardware``.

    ``alu_slots``: instructions the kernel issues per lane beyond its FLOPs' multiply-adds, summed over lanes (e.g. a
    matmul that dequantizes its weights in-kernel on the same ALUs, as Metal's do): each takes one lane for one cycle, the
    slot of one FMA, so they cost ``2 x alu_slots`` FLOPs' time at the FP32 rate, inside the op's compute time.
    """
    compute = op.flops / achievable_flops(hardware, op.dtype) if op.flops else 0.0
    if alu_slots:
        compute += 2 * alu_slots / achievable_flops(hardware, "fp32")
    memory = (op.bytes_read + op.bytes_written) / achievable_bandwidth(hardware)
    return compute, memory


def phase_time(cost: PhaseCost, hardware: Hardware, *, launch_hidden: bool, label: Label = Label.ROOFLINE,
               kernel_floor: float = KERNEL_FLOOR_S, alu_slots: Mapping[OpCost, float] | None = None) -> PhaseTime:
    """The roofline time of every op of ``cost`` on ``hardware``, summed (module docstring).

    ``launch_hidden``: whether the kernels' launches are hidden (CUDA graphs in vLLM, or one host thread
    pool on a CPU); when False each kernel takes at least ``kernel_floor`` (default :data:`KERNEL_FLOOR_S`).
    ``alu_slots``: per op, lane-instructions beyond its FLOPs (:func:`op_seconds`).
    """
    total = compute_sum = memory_sum = launch = 0.0
    dtypes: dict[str, int] = {}
    for op in cost.ops:
        compute, memory = op_seconds(op, hardware, (alu_slots or {}).get(op, 0.0))
        busy = max(compute, memory)
        extra = 0.0 if launch_hidden else max(0.0, kernel_floor - busy)
        total += busy + extra
        compute_sum += compute
        memory_sum += memory
        launch += extra
        if op.flops:
            dtypes[op.dtype] = dtypes.get(op.dtype, 0) + op.flops
    main_dtype = max(dtypes, key=lambda d: dtypes[d]) if dtypes else "float32"
    return PhaseTime(
        seconds=total, compute_seconds=compute_sum, memory_seconds=memory_sum, launch_seconds=launch,
        bandwidth_bytes_s=achievable_bandwidth(hardware), peak_flops=achievable_flops(hardware, main_dtype), label=label,
        flops=cost.flops, bytes_moved=cost.bytes_moved, kernels=cost.kernels, tokens=cost.tokens,
    )
