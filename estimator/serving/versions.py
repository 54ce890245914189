"""What changed between vLLM versions in how a server sizes its KV cache (``--vllm-version``).

One :class:`VLLMRules` per version whose start-up we model; :data:`DEFAULT_VLLM_VERSION` is the
latest. Each field is a rule read from that version's code (cited), or, for the memory that is not
torch's, the figure its own logs print on the hardware named (it depends on the software stack and the
interconnect, not on the model):

- **Sampler** (``vllm/v1/sample/ops/topk_topp_sampler.py``): on CUDA with FlashInfer installed (the
  ``vllm/vllm-openai`` images), ``TopKTopPSampler.forward_cuda`` calls
  ``flashinfer.sampling.top_k_top_p_sampling_from_logits``, which makes the top-k-masked logits and
  their softmax: two float32 ``requests x vocab`` tensors, no sort (``apply_top_k_top_p``'s sort and
  int64 indices are the PyTorch fallback only), and a 1 MiB ``row_states`` buffer.
- **CUDA graphs** (``Worker.determine_available_memory``): captured after the KV cache is allocated, so
  not subtracted from it, unless ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1``.
- **Non-torch memory** (``memory_profiling``: ``non_torch_increase`` = the driver's used memory less
  torch's reserved memory, after the profile run less at the worker's start): on one GPU, the cuBLAS /
  cuBLASLt handles and the kernels CUDA loads lazily for the first forward; under tensor parallelism
  NCCL's buffers for the first all-reduces (on H100 SXM with NVSwitch, NVLS multicast buffers), which
  vLLM's own log shows as ~2.1 GiB per rank; under pipeline parallelism only (send/recv, no all-reduce),
  less than on one GPU, since the point-to-point setup before the start snapshot already loaded them.
"""

from __future__ import annotations

from dataclasses import dataclass

from estimator.errors import BadOptionError, Option

__all__ = ["DEFAULT_VLLM_VERSION", "VLLM_VERSIONS", "VLLMRules", "rules_for"]

MiB = 1024**2
GiB = 1024**3


@dataclass(frozen=True)
class VLLMRules:
    """The accounting of one vLLM version."""

    version: str
    sampler_fp32_copies: int  # float32 requests x vocab tensors the sampler makes beyond the float32 logits
    sampler_scratch_bytes: int  # FlashInfer's row_states buffer
    cuda_graphs_subtracted: bool  # VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS default
    cublas_workspace_bytes: int  # torch's cuBLAS workspace on sm90 (":4096:8" = 32 MiB), allocated at the first matmul
    non_torch_one_gpu: int
    non_torch_tp: dict[int, int]  # per rank, by tensor-parallel size (the nearest smaller size answers others)
    non_torch_pp_only: int
    measured_on: str

    def non_torch(self, tp: int, pp: int) -> int:
        """The non-torch increase of one rank."""
        if tp > 1:
            known = max(size for size in self.non_torch_tp if size <= tp)
            return self.non_torch_tp[known]
        return self.non_torch_pp_only if pp > 1 else self.non_torch_one_gpu


_V0_19 = VLLMRules(
    version="0.19",
    sampler_fp32_copies=2,
    sampler_scratch_bytes=1 * MiB,
    cuda_graphs_subtracted=False,
    cublas_workspace_bytes=32 * MiB,
    non_torch_one_gpu=int(0.25 * GiB),
    non_torch_tp={2: int(2.07 * GiB), 4: int(2.13 * GiB)},
    non_torch_pp_only=int(0.07 * GiB),
    measured_on="H100 80GB HBM3 (SXM, NVSwitch)",
)

VLLM_VERSIONS: dict[str, VLLMRules] = {"0.19": _V0_19}
DEFAULT_VLLM_VERSION = "0.19"


def rules_for(version: str | None) -> VLLMRules:
    """The rules of ``version`` ("0.19", "0.19.0", "v0.19.1": the minor version decides)."""
    text = (version or DEFAULT_VLLM_VERSION).strip().lower().removeprefix("v")
    minor = ".".join(text.split(".")[:2])
    if minor not in VLLM_VERSIONS:
        raise BadOptionError([Option("vllm_version"), f" {version!r} is not one whose accounting is modelled; give one of "
                              f"{', '.join(sorted(VLLM_VERSIONS))} (the default is {DEFAULT_VLLM_VERSION})."],
                             option="vllm_version")
    return VLLM_VERSIONS[minor]
