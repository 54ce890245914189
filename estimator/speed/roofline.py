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

__all__ = ["BANDWIDTH_FRACTION", "FLOPS_FRACTION", "KERNEL_FLOOR_S", "Label", "PhaseTime", "achievable_bandwidth", "achievable_flops",
           "op_seconds", "phase_time"]

BANDWIDTH_FRACTION: dict[Kind, float] = {Kind.GPU: 0.83, Kind.APPLE: 0.83, Kind.CPU: 0.75}
"""Share of the stated peak memory bandwidth a streaming kernel reaches.

GPU: Jia, Maggioni, Staiger, Scarpazza, "Dissecting the NVIDIA Volta GPU Architecture via
Microbenchmarking" (arXiv:1804.06826, 2018), global memory: V100 measured at 750 GB/s of the
900 GB/s stated, 0.83 (HBM3 parts measure nearer 0.9 with copy kernels; we keep the one figure).
Apple: the same figure is assumed (unified LPDDR5 behind the same kind of memory controller;
no microbenchmark of the GPU's bandwidth is cited here). CPU: STREAM triad (McCalpin,
https://www.cs.virginia.edu/stream/) on desktop and server DDR4/DDR5 platforms reports 70-80 % of
the JEDEC peak; 0.75 is its middle.
"""

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
https://developer.nvidia.com/blog/cuda-graphs/) measures 3.8 us per kernel for a stream of short
kernels launched back to back without synchronisation (2.9 us of it the kernel itself). Where the
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
    """Bytes/s a streaming kernel reaches: the stated peak x :data:`BANDWIDTH_FRACTION`."""
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
