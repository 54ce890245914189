"""GPUs as data: the memory each one's driver reports, and a capacity given by hand.

``data/gpus.json`` holds, for each GPU people ask about, ``total_bytes`` — what PyTorch sees,
``torch.cuda.get_device_properties(0).total_memory`` (CUDA's ``totalGlobalMem``) — with the public
logs it was read from. That is the memory a process can use at all: ``nvidia-smi``'s total
(``smi_mib``, kept for reference) is a few hundred MiB larger because it includes what the driver
keeps for itself. Where drivers report slightly different figures the smallest one is kept. The
CUDA context, cuBLAS workspaces and the caching allocator's overheads come out of ``total_bytes``
(:mod:`estimator.fit.runtime`).

Every other GPU and Apple Silicon configuration of the hardware table
(:mod:`estimator.speed.hardware`, with its data sheets) follows, so the fit and the speed answers
share one list: for those no driver figure has been read yet, and ``total_bytes`` is the vendor's
stated memory (a discrete GPU's driver reports some 300 MiB to 1.3 GiB less: RTX 3090 307 MiB,
RTX 4090 519 MiB, H100 841 MiB, T4 1.25 GiB above), or for Apple Silicon Metal's working-set limit
(:func:`estimator.speed.hardware.apple_working_set`). ``source`` says which.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from estimator.errors import BadOptionError, Option

__all__ = ["GPU", "GPUS", "GPU_NAMES", "custom_gpu", "find_gpu", "parse_memory"]


@dataclass(frozen=True)
class GPU:
    """One GPU: the bytes its driver reports to PyTorch and what else matters for the fit."""

    name: str
    stated: str  # the vendor's figure, e.g. "24 GB GDDR6"
    total_bytes: int
    source: str
    compute_capability: str | None = None  # "9.0"; None: not NVIDIA or not known
    vendor: str = "nvidia"
    native_bf16: bool | None = True  # None: not known (a capacity given by hand)
    smi_mib: int | None = None
    aliases: tuple[str, ...] = ()

    @property
    def capacity_bytes(self) -> int:
        return self.total_bytes


def _key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower().removeprefix("nvidia").strip())


@lru_cache(maxsize=1)
def _load() -> tuple[GPU, ...]:
    data = json.loads(resources.files("estimator.fit").joinpath("data/gpus.json").read_text(encoding="utf-8"))
    measured = tuple(GPU(**{**g, "aliases": tuple(g.get("aliases", ()))}) for g in data["gpus"])
    return measured + _from_hardware({_key(n) for g in measured for n in (g.name, *g.aliases)})


def _from_hardware(taken: set[str]) -> tuple[GPU, ...]:
    """The hardware table's GPUs and Macs not in ``gpus.json`` (a name or alias there keeps its entry)."""
    from estimator.speed.hardware import HARDWARE, Kind

    out = []
    for hw in HARDWARE:
        if hw.kind is Kind.CPU or _key(hw.name) in taken:
            continue
        how = (f"Metal's working set, {'2/3' if hw.usable_bytes * 3 == hw.memory_bytes * 2 else '3/4'} of {hw.stated} "
               "(recommendedMaxWorkingSetSize, estimator.speed.hardware)" if hw.kind is Kind.APPLE
               else f"the vendor's stated {hw.stated}; not read from a driver yet (it reports a few hundred MiB less)")
        out.append(GPU(hw.name, hw.stated, hw.usable_bytes, f"{how}: {hw.source}", compute_capability=hw.compute_capability,
                       vendor=hw.vendor, native_bf16=hw.native_bf16, aliases=tuple(a for a in hw.aliases if _key(a) not in taken)))
    return tuple(out)


GPUS: tuple[GPU, ...] = _load()
GPU_NAMES: tuple[str, ...] = tuple(g.name for g in GPUS)


def find_gpu(name: str) -> GPU:
    """The GPU called ``name`` (case, spaces and dashes ignored: ``H100-80GB`` is ``H100 80GB``)."""
    wanted = _key(name)
    for gpu in GPUS:
        if wanted in {_key(gpu.name), *(_key(a) for a in gpu.aliases)}:
            return gpu
    raise BadOptionError([
        Option("gpu"), f" {name!r} is not a GPU we know: use one of {', '.join(GPU_NAMES)}, or give its memory with ",
        Option("gpu_memory"), " (e.g. 24GiB).",
    ], option="gpu")


_UNITS = {"b": 1, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}


def parse_memory(text: object) -> int:
    """``"24GiB"``, ``"80 GB"``, ``"81559MiB"`` or a number of bytes -> bytes (GiB/MiB binary, GB/MB decimal)."""
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*", str(text))
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _UNITS or (unit == "" and "." in match.group(1)):
        raise BadOptionError([
            Option("gpu_memory"), f" must be a size such as 24GiB, 80GB or 16384MiB (GiB = 1024³ bytes, GB = 10⁹); got {text!r}.",
        ], option="gpu_memory")
    nbytes = int(float(match.group(1)) * _UNITS[unit or "b"])
    if not 2**20 <= nbytes <= 2**50:
        raise BadOptionError([Option("gpu_memory"), f" must be between 1 MiB and 1 PiB; got {text!r}."], option="gpu_memory")
    return nbytes


def custom_gpu(memory: object) -> GPU:
    """A GPU known only by its memory (``--gpu-memory``): NVIDIA assumed, bfloat16 support unknown."""
    nbytes = parse_memory(memory)
    from estimator.units import format_bytes

    return GPU(f"GPU with {format_bytes(nbytes)}", f"{memory} (given)", nbytes, "given by the user", native_bf16=None)
