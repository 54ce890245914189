"""What changed between vLLM versions in how a server sizes its KV cache (``--vllm-version``).

One :class:`VLLMRules` per version whose start-up we model; :data:`DEFAULT_VLLM_VERSION` is the
latest. Each field is a rule read from that version's code (cited), or, for the memory that is not
torch's and cannot be derived (lazily loaded kernels, NCCL's connected buffers), a published measurement
on an H100 80GB, cited (it depends on the software stack and the interconnect, not on the model); none
is taken from the runs the replay test checks:

- **Sampler** (``vllm/v1/sample/sampler.py``, ``vllm/v1/sample/ops/topk_topp_sampler.py``): 0.19 uses
  FlashInfer's top-k/top-p only when ``VLLM_USE_FLASHINFER_SAMPLER=1`` (``TopKTopPSampler.__init__``:
  "disabled by default"); otherwise ``forward_native``: ``apply_top_k_top_p`` masks the float32 logits
  in place with ``apply_top_k_top_p_triton`` when there are 8 requests or more (one float32 ``vocab`` row
  per Triton program, ``min(next_power_of_2(min(SMs, requests)), SMs)`` rows, cached in
  ``_TRITON_BUFFER_CACHE``: :mod:`estimator.serving.sms`), else with the PyTorch sort
  (``apply_top_k_top_p_pytorch``: sorted values, int64 indices, the top-k mask, the sorted
  probabilities, the top-p mask); then ``probs = logits.softmax(dtype=float32)`` and
  ``random_sample``'s ``q = torch.empty_like(probs)``: two float32 ``requests x vocab`` tensors beside
  ``Sampler.forward``'s float32 copy of the logits (``_dummy_sampler_run`` sets top-k and top-p).
- **CUDA graphs** (``Worker.determine_available_memory``): captured after the KV cache is allocated, so
  not subtracted from it, unless ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1``.
- **The cold compile's benchmark harnesses** (``combo_kernel_benchmark``): 0.19 pins torch 2.10 and sets
  Inductor's ``combo_kernels`` and ``benchmark_combo_kernel`` (``CompilationConfig.__post_init__``,
  vllm/config/compilation.py, for torch >= 2.9). The model compiles at its first call, which is
  ``profile_run``'s ``_dummy_run`` inside ``memory_profiling`` (vllm/compilation/decorators.py,
  ``__call__``), so what the compile allocates counts in the torch peak: for every topological level
  of a piecewise graph with two or more kernels, torch 2.10's ``Scheduler.speedup_by_combo_kernel``
  benchmarks each kernel on ``rand_strided`` copies of all its buffer arguments at the traced sizes
  (``TritonScheduling.benchmark_fused_nodes`` -> ``get_args``), before any activation exists. The
  first stage's graph starts with the embedding gather fused into the first layer's input norm, whose
  arguments are the whole embedding table (:mod:`estimator.serving.activations`). Torch 2.10 does not yet
  keep indirect-indexing kernels out of these benchmarks (a later torch does). A warm start (compile
  cache and ``.kernel_perf`` files present) skips the compile and its benchmarks.
- **Non-torch memory** (``memory_profiling``: ``non_torch_increase`` = the driver's used memory less
  torch's, after the profile run less at ``Worker.init_device``'s snapshot). 0.19 takes that snapshot
  *after* ``init_worker_distributed_environment`` ("This ensures NCCL buffers are allocated before we
  measure"), so what the communicators allocate at creation is not in it: NCCL's communicator
  (``ncclCommInitRank``), vLLM's custom all-reduce IPC buffers (``CustomAllreduce``: ``meta_size() +
  max_size`` and ``max_size``, ``max_size`` from ``CUSTOM_ALL_REDUCE_MAX_SIZES``, sm90: 64 MiB at TP2,
  32 MiB at TP4) and the symmetric-memory buffers. What the profile run adds, one term each
  (:meth:`VLLMRules.non_torch_terms`):

  * ``first_forward``: what the first forward makes outside torch's allocator on any rank: cuBLAS /
    cuBLASLt handles (their workspaces are torch's since torch 2.3), the kernel modules CUDA loads
    lazily (``CUDA_MODULE_LOADING=LAZY``) and the local memory the context reserves for them. Not
    derivable from the model: the published measurement of the same ``memory_profiling`` on one H100
    80GB, 0.16 GiB (vllm-project/vllm PR #12126, Llama-3.2-11B-Vision, Jan 2025).
  * ``nccl_connect`` (tensor parallelism): the profile run's all-reduces are of
    ``max_num_batched_tokens x hidden`` values (Llama-8B: 64 MiB), not below custom all-reduce's or
    symmetric memory's ``max_size`` on sm90, so they go to PyNccl, and NCCL (>= 2.22,
    ``NCCL_RUNTIME_CONNECT=1``) connects the algorithm's channels and allocates their buffers at that
    first all-reduce. Its size is the published TP2 - TP1 difference of ``non_torch_memory`` on H100
    80GB (NVSwitch), 3.58 - 1.79 = 1.79 GiB per rank (vllm-project/vllm PR #10511, Llama-3-8B, Dec 2024),
    and from three GPUs NCCL's NVLS buffers (``ncclNvlsInit`` turns NVLS off with two GPUs or fewer;
    ``ncclNvlsBufferSetup``, set up at the first collective that uses NVLS under runtime connect:
    ``nvlsChannels x 2 x nvlsChunkSize x NCCL_STEPS x nHeads`` = 16 x 2 x 128 KiB x 8 = 32 MiB per head,
    one head per local rank, ``NVLS_NCHANNELS_SM90`` = 16; the unicast memory rounded to the 2 MiB
    allocation granularity; NCCL 2.27, src/transport/nvls.cc, src/graph/connect.cc). The published TP2
    figure is from vLLM V0, whose snapshot preceded the distributed set-up (V1 moved it after, vLLM PR
    #25359), so it also holds the communicator's creation that 0.19 takes before its snapshot: the closest
    published figure, not the same quantity.
  * Pipeline parallelism adds nothing in the profile run: a stage after the first runs on the dummy
    intermediate tensors ``_dummy_run`` allocates, no send or receive happens.
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
    sampler_fp32_copies: int  # float32 requests x vocab tensors the sampler makes beyond the float32 logits (probs, q)
    topk_topp_triton_min_requests: int  # from this many requests the Triton top-k/top-p (per-SM rows), below it the sort
    cuda_graphs_subtracted: bool  # VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS default
    cublas_workspace_bytes: int  # torch's cuBLAS workspace on sm90 (":4096:8" = 32 MiB), allocated at the first matmul
    combo_kernel_benchmark: bool  # the cold compile benchmarks each kernel on random copies of its arguments
    first_forward_non_torch: int  # cuBLAS handles, lazily loaded modules: a published measurement (see above)
    nccl_connect_tp2: int  # NCCL's buffers connected at the first all-reduce, per rank at TP2 (published)
    nvls_head_bytes: int  # NCCL's NVLS buffers per head (one per rank), from three GPUs
    sources: tuple[str, ...]  # where the non-torch figures come from

    def non_torch_terms(self, tp: int, pp: int) -> dict[str, int]:
        """The non-torch increase of one rank, term by term (``pp`` adds none: no send/receive in the profile run)."""
        terms = {"first_forward": self.first_forward_non_torch}
        if tp > 1:
            terms["nccl_connect"] = self.nccl_connect_tp2
            if tp > 2:  # ncclNvlsInit: no NVLS with two GPUs or fewer
                terms["nccl_nvls"] = tp * self.nvls_head_bytes
        return terms

    def non_torch(self, tp: int, pp: int) -> int:
        """The non-torch increase of one rank."""
        return sum(self.non_torch_terms(tp, pp).values())


_V0_19 = VLLMRules(
    version="0.19",
    sampler_fp32_copies=2,
    topk_topp_triton_min_requests=8,
    cuda_graphs_subtracted=False,
    cublas_workspace_bytes=32 * MiB,
    combo_kernel_benchmark=True,
    first_forward_non_torch=int(0.16 * GiB),
    nccl_connect_tp2=int((3.58 - 1.79) * GiB),
    nvls_head_bytes=16 * 2 * 128 * 1024 * 8,
    sources=("one GPU: vllm-project/vllm PR #12126 (H100 80GB, non_torch_memory 0.16 GiB)",
             "TP2 - TP1: vllm-project/vllm PR #10511 (H100 80GB, non_torch_memory 3.58 vs 1.79 GiB)",
             "NVLS (3+ GPUs): NCCL 2.27 src/transport/nvls.cc ncclNvlsInit / ncclNvlsBufferSetup (16 channels x 2 x 1 MiB "
             "per head, one head per rank)"),
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
