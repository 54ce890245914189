"""Streaming multiprocessors per GPU: how many rows vLLM 0.19's Triton top-k/top-p sampler keeps a buffer for.

``apply_top_k_top_p_triton`` (vllm/v1/sample/ops/topk_topp_triton.py) launches ``min(SMs, requests)``
programs and caches one ``vocab``-wide float32 row per program (``min(next_power_of_2(programs), SMs)``
rows, ``num_compute_units``: CUDA's ``multiProcessorCount``). The counts are the vendors' published
figures (NVIDIA's datasheets and architecture whitepapers; AMD's CDNA 3 whitepaper for the MI300X's
compute units), keyed by the names of :mod:`estimator.fit.gpus`. A GPU given only by its memory
(``--gpu-memory``) gets the largest count here, an upper bound on the buffer.
"""

from __future__ import annotations

__all__ = ["SM_COUNTS", "sm_count"]

SM_COUNTS: dict[str, int] = {
    "T4": 40, "V100 16GB": 80, "V100 32GB": 80, "L4": 58, "A10G": 80, "RTX 3090": 82, "RTX 4090": 128,
    "RTX 5090": 170, "A100 40GB": 108, "A100 80GB": 108, "H100 80GB": 132, "H100 PCIe": 114, "H200": 132,
    "B200": 148, "MI300X": 304,
}


def sm_count(gpu_name: str | None) -> int:
    """The multiprocessors (compute units) of the GPU called ``gpu_name`` (a :mod:`estimator.fit.gpus` name), or the
    largest count known when the GPU is not named or not listed."""
    if gpu_name in SM_COUNTS:
        return SM_COUNTS[gpu_name]
    from estimator.speed.hardware import HARDWARE  # the other GPUs of the fit list: the hardware table's SMs / CUs

    units = next((hw.compute_units for hw in HARDWARE if hw.name == gpu_name and hw.compute_units), None)
    return units or max(SM_COUNTS.values())
