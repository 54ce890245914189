"""Hardware as data: memory, memory bandwidth and peak FLOP/s per dtype of every machine the time model knows.

``data/hardware.json`` holds one entry per GPU, Apple Silicon configuration (chip and unified
memory: ``"M2 Max 96GB"``) and CPU-only machine, each with the vendor page its figures are read
from (``source``) and, where a figure is computed from the vendor's parts (SMs x boost clock x the
architecture whitepaper's per-SM rate), how (``derived``). Peaks are dense (no 2:4 sparsity).

Apple Silicon: Metal lets one process keep ``recommendedMaxWorkingSetSize`` bytes resident on the
GPU, and llama.cpp (ggml-metal) and MLX plan by it. macOS sets it to 2/3 of the unified memory up
to 32 GiB and 3/4 above, as logged by ggml-metal (``ggml_metal_init: recommendedMaxWorkingSetSize``):
M1 Pro 16 GB 11453.25 MB (10^6) = 2/3 x 16 GiB; M2 24 GB 17179.89 MB = 2/3 x 24 GiB; M2 Pro 32 GB
21845.34 MiB = 2/3 x 32 GiB; M3 Max 36 GB 28991.03 MB = 3/4 x 36 GiB; M1 Max 64 GB 49152 MiB = 3/4 x
64 GiB (public llama.cpp logs). That is :attr:`Hardware.usable_bytes` for Apple; ``sudo sysctl
iogpu.wired_limit_mb`` raises it, which we cannot see.

A GPU run under a board power limit below the vendor's board power (``nvidia-smi -pl``) is the same card at a lower SM
clock: :func:`power_capped`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from enum import Enum
from functools import lru_cache
from importlib import resources

from estimator.errors import BadOptionError, Option

__all__ = ["HARDWARE", "Hardware", "Kind", "apple_working_set", "find_hardware", "hardware_names", "power_capped"]


class Kind(str, Enum):
    """What runs the model: a discrete GPU, Apple Silicon's GPU on unified memory, or the CPU alone."""

    GPU = "gpu"
    APPLE = "apple"
    CPU = "cpu"


_GIB = 2**30


def apple_working_set(memory_bytes: int) -> int:
    """Metal's ``recommendedMaxWorkingSetSize`` for a Mac with ``memory_bytes`` of unified memory (module docstring)."""
    return memory_bytes * 2 // 3 if memory_bytes <= 32 * _GIB else memory_bytes * 3 // 4


@dataclass(frozen=True)
class Hardware:
    """One machine's figures for the time model (all bytes and FLOP/s as plain numbers, decimal as vendors state them)."""

    name: str
    vendor: str
    kind: Kind
    memory_bytes: int
    bandwidth_bytes_s: float
    flops: dict[str, float]  # dense peak FLOP/s by compute dtype key: fp32 tf32 fp16 bf16 fp16_acc16 fp8 int8 fp4
    source: str
    stated: str = ""
    aliases: tuple[str, ...] = ()
    compute_units: int | None = None  # SMs (NVIDIA) or CUs (AMD)
    compute_capability: str | None = None
    native_bf16: bool | None = None
    derived: str = ""
    chip: str = ""  # Apple: the chip (``"M2 Max"``)
    extra: dict[str, str] = field(default_factory=dict)
    # links to other GPUs (estimator.speed.comm), from ``link_source``: the PCIe slot's bytes/s in one direction
    # (lanes x the PCI-SIG rate), NVLink's in one direction (half the data sheet's bidirectional figure) and how many
    # GPUs that link joins (8 through an HGX board's NVSwitch, 2 for a bridge); None where the machine has none
    pcie_bytes_s: float | None = None
    pcie: str | None = None
    gpu_link_bytes_s: float | None = None
    gpu_link_gpus: int | None = None
    link_source: str = ""
    # the board power the vendor's spec page states (NVIDIA's "Graphics Card Power" / "Total Graphics Power"), the power
    # the boost clock of ``derived`` is rated at (:func:`power_capped`); ``board_power_source`` in ``extra`` says where
    board_power_w: float | None = None

    @property
    def usable_bytes(self) -> int:
        """Memory a model may use: Apple's Metal working set (:func:`apple_working_set`), else the stated memory."""
        return apple_working_set(self.memory_bytes) if self.kind is Kind.APPLE else self.memory_bytes

    def peak_flops(self, dtype: str) -> float:
        """Dense peak FLOP/s for a compute dtype (``"float16"``, ``"bfloat16"``, ``"fp16"``, ``"Q4_K"``...).

        A dtype the vendor states no figure for falls back along: fp8/int8 -> fp16, bf16 -> fp16
        (where bf16 runs on the same units), tf32 -> fp32, anything unknown -> fp32.
        """
        key = _dtype_key(dtype)
        for candidate in (key, *_FALLBACK.get(key, ()), "fp32"):
            if candidate in self.flops:
                return self.flops[candidate]
        raise ValueError(f"{self.name} states no FLOP/s")


_DTYPE_KEYS = {
    "float32": "fp32", "fp32": "fp32", "f32": "fp32", "tf32": "tf32", "float16": "fp16", "fp16": "fp16", "f16": "fp16", "half": "fp16",
    "bfloat16": "bf16", "bf16": "bf16", "fp16_acc16": "fp16_acc16", "float8": "fp8", "fp8": "fp8", "float8_e4m3fn": "fp8",
    "float8_e5m2": "fp8", "int8": "int8", "i8": "int8", "fp4": "fp4",
}
_FALLBACK = {"fp16_acc16": ("fp16",), "bf16": ("fp16",), "fp8": ("fp16",), "int8": ("fp16",), "fp4": ("fp8", "fp16"), "tf32": ("fp32",)}


def _dtype_key(dtype: str) -> str:
    return _DTYPE_KEYS.get(dtype.lower(), dtype.lower())


def _key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower().removeprefix("nvidia").removeprefix("apple").strip())


_FIELDS = {"name", "vendor", "kind", "memory_bytes", "bandwidth_bytes_s", "flops", "source", "stated", "aliases", "compute_units",
           "compute_capability", "native_bf16", "derived", "chip", "pcie_bytes_s", "pcie", "gpu_link_bytes_s", "gpu_link_gpus",
           "link_source", "board_power_w"}


@lru_cache(maxsize=1)
def _load() -> tuple[Hardware, ...]:
    data = json.loads(resources.files("estimator.speed").joinpath("data/hardware.json").read_text(encoding="utf-8"))
    out = []
    for entry in data["hardware"]:
        known = {k: v for k, v in entry.items() if k in _FIELDS}
        out.append(Hardware(**{**known, "kind": Kind(entry["kind"]), "aliases": tuple(entry.get("aliases", ())),
                               "flops": {k: float(v) for k, v in entry["flops"].items()}},
                            extra={k: str(v) for k, v in entry.items() if k not in _FIELDS}))
    return tuple(out)


HARDWARE: tuple[Hardware, ...] = _load()


def hardware_names(kind: Kind | None = None) -> tuple[str, ...]:
    return tuple(h.name for h in HARDWARE if kind is None or h.kind is kind)


def find_hardware(name: str) -> Hardware:
    """The machine called ``name`` or one of its aliases (case, spaces and dashes ignored); a name first, then aliases."""
    wanted = _key(name)
    for hw in HARDWARE:
        if _key(hw.name) == wanted:
            return hw
    for hw in HARDWARE:
        if wanted in {_key(a) for a in hw.aliases}:
            return hw
    raise BadOptionError([Option("gpu"), f" {name!r} is not hardware we know: use one of {', '.join(hardware_names())}, or give "
                          "its memory with ", Option("gpu_memory"), " (no speed then)."], option="gpu")


def power_capped(hw: Hardware, cap_w: float) -> Hardware:
    """``hw`` under a board power limit of ``cap_w`` watts (``nvidia-smi -pl``; the ``Pwr:Usage/Cap`` column of
    ``nvidia-smi``): every peak FLOP/s scaled by the SM clock the cap leaves, the memory bandwidth unchanged.

    The clock: CMOS switching power is ``activity x capacitance x V^2 x f`` (Hennessy & Patterson, *Computer
    Architecture: A Quantitative Approach*, 5th ed., section 1.5, "Trends in Power and Energy in Integrated
    Circuits"), and GPU Boost lowers the voltage with the clock along the card's voltage/frequency curve (V ~ f), so
    the power goes as ``f^3``. Taking the vendor's board power (:attr:`Hardware.board_power_w`) as the power at the
    rated boost clock the peaks are computed from, a cap below it leaves ``(cap / board power)^(1/3)`` of that clock.
    Counting the whole board power as the core's is the mildest reading: the memory's and the static share do not
    shrink with the clock, so the core's own budget falls by more and the clock with it. A published measurement
    agrees: a 3090 (350 W) capped at 315 W ran a llama.cpp ``pp8192`` prefill at a median SM clock of 1,635-1,650 MHz
    over three runs (github.com/ashalliants/ninfer-3090 pull request #72, nvidia-smi sampled at 2 Hz), where this
    gives 1,695 MHz x 0.9^(1/3) = 1,636 MHz.

    The memory clock is not lowered by the cap: the same measurement logged 9,501 MHz (the compute P2 state's memory
    clock) in every sample of the capped decode and prefill, and the power-cap sweeps of github.com/noonghunna/club-3090
    (issues #103, #104: RTX 3090s from 210 W up) log the same 9,501 MHz at each cap quoted there. A cap at or above the board power changes
    nothing here (the boost clock is then bounded by the voltage/frequency curve, not the power). A machine without a
    stated board power cannot be capped: ``ValueError``.
    """
    if hw.board_power_w is None:
        raise ValueError(f"{hw.name} states no board power: a power cap cannot be modelled")
    clock = min(1.0, (cap_w / hw.board_power_w) ** (1 / 3))
    if clock >= 1.0:
        return hw
    return replace(hw, flops={k: v * clock for k, v in hw.flops.items()},
                   extra={**hw.extra, "power_cap_w": f"{cap_w:g}", "sm_clock_share": f"{clock:.4f}"})
