"""llama.cpp's speed for a GGUF model: prompt processing (pp) and generation (tg) tokens/s, modelled.

Built from the GGUF's own tensors (their ggml types and bytes, gguf-py's block sizes through
:mod:`estimator.gguf.header`) and hyperparameters (:mod:`estimator.gguf.hparams`), as ggml's
CUDA / Metal / CPU kernels run them, each kernel timed by the roofline (:mod:`estimator.speed.roofline`):

* **tg** (one token, batch 1): every weight matrix is one mat-vec kernel that reads the matrix once
  (its bytes in the file: a Q4_K matrix is 144 bytes per 256 weights); the token embedding reads one
  row; on CUDA a quantized matrix's input is first quantized to ``q8_1`` by its own kernel
  (``quantize_q8_1``, one per quantized ``mul_mat``); each layer reads its KV cache up to the context; without flash attention ggml's ``mul_mat``
  broadcasts K and V over the query heads, so a KV head's rows are read once per query head it
  serves (``n_head / n_head_kv`` times), with flash attention once; llama.cpp before PR #10318 ran
  those two matmuls through batched cuBLAS on GPUs with fast FP16, 3 or 4 kernels each
  (:attr:`LlamaCppRun.kq_batched_cublas`). Norms, RoPE, the cache copies,
  softmax, activations and residual adds are one small kernel each; every kernel takes at least the
  launch floor (:data:`~estimator.speed.roofline.KERNEL_FLOOR_S`, or with llama.cpp's CUDA graphs
  :data:`KERNEL_FLOOR_GRAPH_S`).
* **pp** (a prompt in micro-batches of ``n_ubatch`` tokens, 512 by default): each weight matrix is
  a matmul of ``2 x rows x cols x tokens`` FLOPs. On CUDA an F16 matrix, and a quantized one off
  MMQ, goes through cuBLAS as ``ggml_cuda_op_mul_mat_cublas`` runs it: the weight dequantized to F16
  by its own kernel (read the quant, write 2 bytes a weight), the input converted to F16, an F16
  GEMM into F16 and the result converted back to F32 (llama.cpp before int8 tensor-core MMQ,
  June 2024, and on Volta since); or the input quantized to ``q8_1`` and multiplied in-kernel by MMQ
  at the int8 tensor rate (``mmq``); Metal and the CPU dequantize inside the matmul.
  Without flash attention the scores ``n_head x tokens x n_kv`` are written as F32 by the KQ
  matmul, read and written by the softmax, converted to F16 and read by the KQV matmul (20 bytes a
  score); on an NVIDIA GPU with fast FP16 ``ggml_cuda_mul_mat_batched_cublas`` writes them in F16 and
  converts them to F32 by its own kernel (24 bytes a score), beside converting Q to F16 and the output
  back to F32 (:func:`_kq_batched_cublas`); with flash attention one kernel reads K and V. Each micro-batch attends to the cache
  filled so far (``n_kv`` grows by ``n_ubatch`` per micro-batch).
* **offload** (``n_gpu_layers`` below all): the first layers stay on the CPU (llama.cpp's
  ``i_gpu_start``, :mod:`estimator.gguf.offload`); in tg they run on the host at the RAM's
  bandwidth; in pp llama.cpp copies their weights to the GPU for each micro-batch (batches of 32
  tokens and more) over the GPU's host link (:func:`host_link`) and multiplies there.
* **-nkvo** (``offload_kqv`` False): the KV cache stays in host RAM and "all nodes between the KV store and the attention
  output are run on the CPU" (llama.cpp's graph callback: ``kqv_merged_cont`` set to the CPU backend, which the
  scheduler extends back to the cache store; since PR #5049, https://github.com/ggml-org/llama.cpp/pull/5049, "run all
  KQV ops on the CPU with no KV offload"). For a layer computed on the GPU, each step the new tokens' Q (after RoPE), K
  and V (F32) cross to the host, the host stores K and V into its cache (``cpy k`` / ``cpy v``), runs KQ, the softmax
  and KQV reading the whole cache at the host RAM's bandwidth and its FLOPs at the host CPU's rate, and the attention
  output (F32, ``n_head x head_v`` a token) crosses back: two graph splits a layer, each a copy and a stream
  synchronisation (:data:`SPLIT_SYNC_S`). CUDA graphs do not survive the alternating splits (:func:`generation`).
* **host link** (a discrete GPU): each step the token embeddings, looked up on the host where ``token_embd`` stays,
  cross to the GPU (``n_embd x 4`` bytes a token), and after it the host copies back the logits it asked for,
  ``n_vocab x 4`` bytes a token (``ggml_backend_tensor_get`` of the result into the context's logits buffer, inside
  ``llama_decode``): one token's in llama-bench and llama-cli, every token's in llama-perplexity.

Labelled ``modelled``: the FLOP and byte counts are exact for the kernels named; the times are the
roofline's, with its published constants.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum

from estimator.gguf.header import TensorInfo
from estimator.gguf.hparams import HParams
from estimator.gguf.kv_cache import row_bytes
from estimator.gguf.weights import INPUT_TENSORS, layer_of
from estimator.speed.cost import OpCost, Phase, PhaseCost
from estimator.speed.hardware import Hardware, Kind, find_hardware
from estimator.speed.roofline import KERNEL_FLOOR_S, Label, PhaseTime, phase_time

__all__ = ["DEFAULT_HOST", "SPLIT_SYNC_S", "KERNEL_FLOOR_GRAPH_S", "MEASURED_ERROR", "METAL_DEQUANT_SLOTS", "METAL_QUARTER_RATE", "PCIE_BYTES_S", "LlamaCppRun", "LlamaCppSpeed", "QuantGemm", "answer", "host_link",
           "generation", "prompt", "speed", "tg_cost"]

KERNEL_FLOOR_GRAPH_S = 3.4e-6
"""A kernel's least time inside a CUDA graph: NVIDIA's "Getting Started with CUDA Graphs" (A. Gray, 2019,
https://developer.nvidia.com/blog/cuda-graphs/) measures 3.4 us per kernel for the same short kernels
replayed from a graph (3.8 us launched one by one; the figures checked against a public transcription of the blog's
code and timings, :data:`~estimator.speed.roofline.KERNEL_FLOOR_S`). llama.cpp captures its batch-1 decode in a CUDA
graph from build b2822 (PR #6766, May 2024) on Ampere and newer; Volta and older run without."""

PCIE_BYTES_S = 31.5e9
"""PCIe 4.0 x16: 16 GT/s x 16 lanes x 128/130 encoding / 8 bits = 31.5 GB/s each way (PCI-SIG PCI Express
Base Specification 4.0); what llama.cpp's copies of CPU-held weights to the GPU cross in pp, and the logits back to the
host after every step, on a GPU whose entry states no link (:attr:`Hardware.pcie_bytes_s`)."""


def host_link(hardware: Hardware) -> float:
    """Bytes/s each way between the host and a discrete GPU: its data sheet's link
    (:attr:`~estimator.speed.hardware.Hardware.pcie_bytes_s`, from its data sheet), else PCIe 4.0 x16 (:data:`PCIE_BYTES_S`)."""
    return hardware.pcie_bytes_s or PCIE_BYTES_S

SPLIT_SYNC_S = 9.6e-6
"""What one crossing between the GPU's and the CPU's graph splits costs beside its bytes: ggml-backend's scheduler copies
the split's inputs (``ggml_backend_tensor_copy``, a ``cudaMemcpyAsync``) and synchronises the stream before the other
backend runs. NVIDIA's "Getting Started with CUDA Graphs" (A. Gray, 2019, https://developer.nvidia.com/blog/cuda-graphs/)
measures 9.6 us per short kernel with a stream synchronisation after each (the same source as
:data:`~estimator.speed.roofline.KERNEL_FLOOR_S`); taken as one launch plus one synchronisation per crossing."""

DEFAULT_HOST = "CPU DDR5-5600 2ch 64GB"
_PLAIN = {"F32", "F16", "BF16", "F64", "I8", "I16", "I32", "I64"}
_F32 = 4


class QuantGemm(str, Enum):
    """How llama.cpp multiplies a quantized matrix by a batch on CUDA."""

    DEQUANT = "dequant"  # dequantize to F16 (own kernel), then cuBLAS F16 GEMM
    MMQ = "mmq"  # in-kernel (int8 tensor cores): the quant read once, FLOPs at the int8 rate


@dataclass(frozen=True)
class LlamaCppRun:
    """llama.cpp's settings that change its speed (llama-bench's names)."""

    flash_attn: bool = False
    n_ubatch: int = 512
    type_k: str = "f16"
    type_v: str = "f16"
    n_gpu_layers: int = -1  # -1: every layer on the GPU
    offload_kqv: bool = True
    cuda_graphs: bool = True  # tg on CUDA: llama.cpp's CUDA graphs (b2822 and later, Ampere and newer)
    quant_gemm: QuantGemm = QuantGemm.MMQ
    all_logits: bool = False  # the output matrix for every prompt token (llama-perplexity) or only the last (llama-bench, llama-cli)
    kq_batched_cublas: bool = False
    """Whether one token's KQ and KQV without flash attention run through ``ggml_cuda_mul_mat_batched_cublas`` (3 or 4
    kernels each, :func:`_kq_batched_cublas`) on an NVIDIA GPU with fast FP16, as llama.cpp did before PR #10318
    (https://github.com/ggml-org/llama.cpp/pull/10318, "CUDA: remove DMMV, consolidate F16 mult mat vec", November 2024),
    or one kernel each (today's ``ggml_cuda_mul_mat_vec``, False)."""
    fused_glu: bool = True
    """Whether a gated FFN's activation and product are one kernel (``ggml_swiglu_split``: the GLU ops of PR #14158, June
    2025) or two (``ggml_silu`` / ``ggml_gelu`` then ``ggml_mul``, as ``llm_build_ffn`` built it before)."""
    qkv_cont: bool = False
    """Whether the graph splits a fused QKV projection (``attn_qkv``: GPT-NeoX, Falcon, Phi-2, MPT, DBRX...) into Q, K and V by
    copying three views (``ggml_cont(ggml_view_2d(...))``, three kernels a layer), as llama.cpp's graph builders did in 2024
    (``build_gptneox``, ``build_falcon``, ``build_phi2``, ``build_dbrx`` in src/llama.cpp of the b4400 era); today's
    ``llm_build_gptneox`` (src/models/gptneox.cpp) takes ``ggml_view_3d`` views without copies (False)."""


@dataclass(frozen=True)
class LlamaCppSpeed:
    """One speed answer: tokens/s, the time's parts on the GPU and on the host, and the inputs a user can check."""

    phase: Phase
    tokens_per_second: float
    tokens: int
    seconds: float
    gpu: PhaseTime | None
    host: PhaseTime | None
    transfer_seconds: float
    weight_bytes: int  # weight bytes read per token (tg) or per micro-batch (pp)
    kv_bytes: int  # KV cache bytes read (tg: per token at the mean context)
    bytes_per_token: int
    flops_per_token: int
    hardware: str
    label: Label = Label.MODELLED
    notes: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, object]:
        return {
            "phase": self.phase.value, "tokens_per_second": self.tokens_per_second, "tokens": self.tokens, "seconds": self.seconds,
            "bytes_per_token": self.bytes_per_token, "flops_per_token": self.flops_per_token, "weight_bytes": self.weight_bytes,
            "kv_bytes": self.kv_bytes, "transfer_seconds": self.transfer_seconds, "hardware": self.hardware, "label": self.label.value,
            "gpu": None if self.gpu is None else self.gpu.to_dict(), "host": None if self.host is None else self.host.to_dict(),
        }


def _elements(t: TensorInfo) -> int:
    n = 1
    for d in t.shape:
        n *= d
    return n


def _is_matrix(t: TensorInfo) -> bool:
    return len([d for d in t.shape if d > 1]) >= 2


def _layers_on_cpu(hp: HParams, run: LlamaCppRun) -> int:
    """Repeating layers llama.cpp keeps on the CPU: ``i_gpu_start = max(n_layer + 1 - ngl, 0)``."""
    if run.n_gpu_layers < 0:
        return 0
    return min(hp.n_layer, max(hp.n_layer + 1 - run.n_gpu_layers, 0))


def _kv_row(hp: HParams, il: int, run: LlamaCppRun) -> tuple[int, int]:
    k = row_bytes(run.type_k, hp.n_embd_k_gqa(il)) if hp.n_head_kv[il] else 0
    v = row_bytes(run.type_v, hp.n_embd_v_gqa(il)) if hp.n_head_kv[il] and hp.n_embd_v_gqa(il) else 0
    return k, v


def _kv_cells(hp: HParams, il: int, n_kv: int) -> int:
    return min(n_kv, hp.n_swa) if hp.is_swa[il] and hp.n_swa else n_kv


def _pad(n: int, run: LlamaCppRun) -> int:
    """``n_kv``: the cache cells one step attends to, llama.cpp's padding (256 with flash attention, else 32)."""
    pad = 256 if run.flash_attn else 32
    return -(-n // pad) * pad


def _act(dtype: str) -> str:
    return "fp16" if dtype in ("F16", "BF16") else "fp32"


def _gemm_dtype(ggml_type: str, hardware: Hardware) -> str:
    """The peak a batched F16 matmul runs at: on NVIDIA GPUs llama.cpp asks cuBLAS for F16 inputs with F16 accumulation
    (``cublasGemmEx(..., CUBLAS_COMPUTE_16F)`` in ``ggml_cuda_op_mul_mat_cublas``), the tensor cores' ``fp16_acc16`` rate
    (twice the FP32-accumulate rate on GeForce cards, the same on data-centre ones)."""
    if ggml_type not in ("F16", "BF16"):
        return "fp32"
    return "fp16_acc16" if hardware.kind is Kind.GPU and hardware.vendor == "nvidia" and ggml_type == "F16" else _act(ggml_type)


def _groups(tensors: Sequence[TensorInfo], hp: HParams) -> tuple[list[TensorInfo], dict[int, list[TensorInfo]], list[TensorInfo]]:
    inputs, output = [], []
    layers: dict[int, list[TensorInfo]] = {il: [] for il in range(hp.n_layer)}
    for t in tensors:
        il = layer_of(t)
        if il is not None:
            layers.setdefault(il, []).append(t)
        elif t.name.startswith(INPUT_TENSORS):
            inputs.append(t)
        else:
            output.append(t)
    if not any(t.name == "output.weight" for t in output):  # tied embeddings: the head reads token_embd
        output += [t for t in inputs if t.name == "token_embd.weight"]
    return inputs, layers, output


def _small(name: str, n: int, width: int, passes: int = 2) -> OpCost:
    """An element-wise kernel over ``n`` tokens of ``width`` F32 values (read ``passes - 1`` inputs, write one)."""
    return OpCost(name, n * width, (passes - 1) * n * width * _F32, n * width * _F32, "fp32", formula="elementwise")


def _layer_fixed(hp: HParams, il: int, n: int, layer: list[TensorInfo], run: LlamaCppRun) -> list[OpCost]:
    """The kernels of a layer that are not a weight's: norms, RoPE, cache copies, activation and residual adds; and, where
    the layer has a fused QKV matrix and ``run.qkv_cont``, the three copies that split its output (:class:`LlamaCppRun`)."""
    e = hp.n_embd
    ops = [_small("norm", n, e) for t in layer if t.name.endswith("norm.weight")]
    ops += [_small("mul/add (norm weight, bias)", n, e, 3) for t in layer if not _is_matrix(t)]
    q = hp.n_head[il] * hp.head_k[il]
    if run.qkv_cont and any(t.name.endswith(".attn_qkv.weight") for t in layer):
        ops += [_small("cont (Q view)", n, q), _small("cont (K view)", n, hp.n_embd_k_gqa(il)),
                _small("cont (V view)", n, max(hp.n_embd_v_gqa(il), 1))]
    ops += [_small("rope q", n, q), _small("rope k", n, hp.n_embd_k_gqa(il)), _small("cpy k", n, hp.n_embd_k_gqa(il)),
            _small("cpy v", n, max(hp.n_embd_v_gqa(il), 1))]
    n_ff = max((t.shape[1] for t in layer if ".ffn_up" in t.name and len(t.shape) > 1), default=hp.n_ff)
    gated = any(".ffn_gate." in t.name for t in layer)
    if gated and not run.fused_glu:
        ops += [_small("activation (silu/gelu)", n, n_ff, 2), _small("mul (gate x up)", n, n_ff, 3)]
    else:
        ops += [_small("activation", n, n_ff, 3 if gated else 2)]
    ops += [_small("add (residual)", n, e, 3), _small("add (residual)", n, e, 3)]
    return ops


def _attention(hp: HParams, il: int, n: int, n_kv: int, run: LlamaCppRun, cuda: bool = False) -> tuple[list[OpCost], int]:
    """Attention of ``n`` query tokens over ``n_kv`` cache cells in one layer; and the KV bytes read.

    ``cuda``: the attention runs on an NVIDIA GPU with fast FP16 (:func:`_fast_fp16`), whose F16 KQ and KQV go through
    batched cuBLAS (:func:`_kq_batched_cublas`): a batch always, one token where ``run.kq_batched_cublas``."""
    if not hp.n_head_kv[il]:
        return [], 0
    cells = _kv_cells(hp, il, n_kv)
    k_row, v_row = _kv_row(hp, il, run)
    heads, kv_heads = hp.n_head[il], hp.n_head_kv[il]
    flops = 2 * heads * n * cells * (hp.head_k[il] + hp.head_v[il])
    q_bytes = n * heads * hp.head_k[il] * _F32
    out_bytes = n * heads * hp.head_v[il] * _F32
    if run.flash_attn:
        kv = cells * (k_row + v_row)
        return [OpCost("flash_attn_ext", flops, kv + q_bytes, out_bytes, "fp16", formula="attention")], kv
    reread = heads // kv_heads  # ggml mul_mat broadcasts K / V over the query heads
    att = "fp16_acc16" if n > 1 else "fp16"
    k_read, v_read = cells * k_row * reread, cells * v_row * reread
    scores = heads * n * cells
    if cuda and (n > 1 or run.kq_batched_cublas) and run.type_k == run.type_v == "f16":
        return _kq_batched_cublas(hp, il, n, cells, k_read, v_read, att), k_read + v_read
    ops = [
        OpCost("mul_mat (KQ)", 2 * heads * n * cells * hp.head_k[il], k_read + q_bytes, scores * _F32, att, formula="attention"),
        OpCost("soft_max_ext", 5 * scores, scores * _F32 + n * cells * 2, scores * _F32, "fp32", formula="elementwise"),
        OpCost("mul_mat (KQV)", 2 * heads * n * cells * hp.head_v[il], v_read + scores * (_F32 + 2 * 2), scores * 2 + out_bytes, att,
               formula="attention"),
        _small("cont (permute)", n, heads * hp.head_v[il]),
    ]
    return ops, k_read + v_read


def _fast_fp16(hardware: Hardware) -> bool:
    """ggml-cuda's ``fp16_performance_good`` (January 2024) / ``fast_fp16_available`` (later) on NVIDIA: compute capability
    6.0 (P100) and 7.0 on; Pascal's 6.1 (GTX 10 series, P40) runs FP16 slowly."""
    cc = float(hardware.compute_capability or 0)
    return hardware.kind is Kind.GPU and hardware.vendor == "nvidia" and (cc >= 7.0 or cc == 6.0)


def _kq_batched_cublas(hp: HParams, il: int, n: int, cells: int, k_read: int, v_read: int, att: str) -> list[OpCost]:
    """Attention of ``n`` tokens without flash attention as ``ggml_cuda_mul_mat_batched_cublas`` runs it on an NVIDIA GPU with
    fast FP16 (:func:`_fast_fp16`): every batch, and one token in llama.cpp before PR #10318
    (:attr:`LlamaCppRun.kq_batched_cublas`).

    ``ggml_cuda_mul_mat`` sends an F16 ``src0`` to the FP32 single-batch kernels (``ggml_cuda_mul_mat_vec_p021`` for KQ,
    ``ggml_cuda_mul_mat_vec_nc`` for KQV) only where FP16 is slow (``!fp16_performance_good``, Jan 2024 ggml-cuda.cu;
    ``any_gpus_with_slow_fp16``, later); elsewhere, batch 1 included, ``src1->ne[2]*src1->ne[3] > 1`` (one channel per query
    head) takes "KQ + KQV multi-batch": ``ggml_cuda_mul_mat_batched_cublas``. For each of KQ and KQV that function converts
    ``src1`` (F32) to F16 (``to_fp16_cuda``), multiplies with ``cublasGemmStridedBatchedEx`` where there is no broadcast
    (``r2 == 1``) and ``src0`` and ``src1`` are contiguous across dims 2 and 3 (``nb[2]*ne[2] == nb[3]``), or else with
    ``cublasGemmBatchedEx`` after ``k_compute_batched_ptrs`` builds the pointer arrays, into F16 (``GGML_PREC_DEFAULT``),
    and converts ``dst`` back to F32 (``to_fp32_cuda``). The pointer kernel runs for grouped-query attention
    (``r2 = n_head / n_head_kv > 1``) and for the KQ of a batch: Q permuted to ``[head, tokens, n_head]`` has
    ``nb[2]*ne[2] = head x n_head x 4`` bytes but ``nb[3]`` that times the tokens, equal only for one token; the K and V
    views and the soft_max output are contiguous across those dims. So 3 or 4 kernels a matmul where one token's FP32
    kernels are one. Counted for every architecture at the default precision (the architectures llama.cpp sets to
    ``GGML_PREC_F32`` write the KQ in F32 and skip its ``to_fp32``: not distinguished). The GEMMs read K and V as the other
    path does (once per query head)."""
    heads, kv_heads = hp.n_head[il], hp.n_head_kv[il]
    q, out, scores = n * heads * hp.head_k[il], n * heads * hp.head_v[il], n * heads * cells

    def ptrs(needed: bool) -> list[OpCost]:
        return [OpCost("k_compute_batched_ptrs", 0, 0, 3 * heads * 8, "fp32", formula="elementwise")] if needed else []

    return [
        OpCost("to_fp16 (Q)", 0, q * _F32, q * 2, "fp16", formula="elementwise"),
        *ptrs(heads != kv_heads or n > 1),
        OpCost("cublas batched gemm (KQ)", 2 * scores * hp.head_k[il], k_read + q * 2, scores * 2, att, formula="attention"),
        OpCost("to_fp32 (KQ)", 0, scores * 2, scores * _F32, "fp32", formula="elementwise"),
        OpCost("soft_max_ext", 5 * scores, scores * _F32 + n * cells * 2, scores * _F32, "fp32", formula="elementwise"),
        OpCost("to_fp16 (KQ soft_max)", 0, scores * _F32, scores * 2, "fp16", formula="elementwise"),
        *ptrs(heads != kv_heads),
        OpCost("cublas batched gemm (KQV)", 2 * scores * hp.head_v[il], v_read + scores * 2, out * 2, att, formula="attention"),
        OpCost("to_fp32 (KQV)", 0, out * 2, out * _F32, "fp32", formula="elementwise"),
        _small("cont (permute)", n, out // n),
    ]


def _matmul(t: TensorInfo, n: int, run: LlamaCppRun, hardware: Hardware, share: float = 1.0) -> list[OpCost]:
    """The kernels that multiply ``n`` tokens by weight ``t`` (rows ``shape[1]``, columns ``shape[0]``).

    ``share``: of a stacked experts tensor (``ffn_*_exps``), the part each token uses (``n_expert_used / n_expert``,
    ``mul_mat_id``): one token reads only its experts; a batch of many tokens reads them all.
    """
    elems = int(_elements(t) * share)
    cols = t.shape[0]
    rows = _elements(t) // max(t.shape[0], 1) // (t.shape[2] if len(t.shape) > 2 and share < 1 else 1)
    act_in, act_out = n * cols * _F32, n * rows * _F32
    quantized = t.ggml_type not in _PLAIN
    cuda = hardware.kind is Kind.GPU
    if n == 1:  # mat-vec: reads the matrix (its experts for this token) once
        ops = [_quantize_q8_1(n, cols)] if quantized and cuda else []
        return ops + [OpCost(f"mul_mat_vec ({t.ggml_type})", 2 * elems, int(t.n_bytes * share) + act_in, act_out, _act(t.ggml_type),
                             formula="matmul")]
    if cuda and hardware.vendor == "nvidia" and (not quantized or run.quant_gemm is QuantGemm.DEQUANT):
        return _cublas_f16(t, n, elems, cols, rows, hardware)
    if not quantized:
        return [OpCost(f"mul_mat ({t.ggml_type})", 2 * elems * n, t.n_bytes + act_in, act_out, _gemm_dtype(t.ggml_type, hardware), formula="matmul")]
    dtype = "int8" if cuda and hardware.vendor == "nvidia" else "fp16"
    ops = [_quantize_q8_1(n, cols)] if cuda else []
    return ops + [OpCost(f"mul_mat_q ({t.ggml_type})", 2 * elems * n, t.n_bytes + n * cols * _Q8_1_BYTES // _QK8_1, act_out,
                         dtype if hardware.kind is not Kind.CPU else "fp32", formula="matmul")]


_QK8_1, _Q8_1_BYTES = 32, 36
"""ggml's ``block_q8_1``: 32 int8 values and two halves (scale, sum), 36 bytes a block (ggml-common.h)."""


def _quantize_q8_1(n: int, cols: int) -> OpCost:
    """The kernel that quantizes a quantized matmul's F32 input to ``block_q8_1`` before MMVQ / MMQ run on it: ggml-cuda's
    ``ggml_cuda_op_mul_mat`` calls ``quantize_row_q8_1_cuda`` on ``src1`` once per ``mul_mat`` whose op takes it
    (``convert_src1_to_q8_1``: the mat-vec ``ggml_cuda_op_mul_mat_vec_q`` and ``ggml_cuda_op_mul_mat_q``), on CUDA and
    HIP alike. Its bytes are small; its cost at batch 1 is the kernel's launch floor."""
    return OpCost("quantize_q8_1", 0, n * cols * _F32, n * cols * _Q8_1_BYTES // _QK8_1, "fp32", formula="elementwise")


def _cublas_f16(t: TensorInfo, n: int, elems: int, cols: int, rows: int, hardware: Hardware) -> list[OpCost]:
    """A batched matmul through cuBLAS, as ``ggml_cuda_op_mul_mat_cublas`` runs it on Volta and newer (F16 weights, and
    quantized ones off MMQ): the weight dequantized to F16 by its own kernel (``to_fp16_cuda(src0)``, quantized types only),
    the F32 activations converted to F16 (``to_fp16_cuda(src1)``), ``cublasGemmEx`` with F16 inputs and output and
    ``CUBLAS_COMPUTE_16F`` (the ``fp16_acc16`` tensor rate), and the F16 result converted back to F32 (``to_fp32_cuda``):
    four kernels (three for an F16 weight)."""
    ops = []
    if t.ggml_type not in _PLAIN:
        ops.append(OpCost(f"dequantize ({t.ggml_type} -> F16)", 0, t.n_bytes, 2 * elems, "fp16", formula="elementwise"))
    ops += [OpCost("to_fp16 (src1)", 0, n * cols * _F32, n * cols * 2, "fp16", formula="elementwise"),
            OpCost("cublas gemm (F16)", 2 * elems * n, 2 * elems + n * cols * 2, n * rows * 2, _gemm_dtype("F16", hardware),
                   formula="matmul"),
            OpCost("to_fp32 (dst)", 0, n * rows * 2, n * rows * _F32, "fp32", formula="elementwise")]
    return ops


METAL_QUARTER_RATE = 4
"""Issue slots one 32-bit shift or integer <-> float conversion takes on an Apple GPU: P. Turner's metal-benchmarks
(github.com/philipturner/metal-benchmarks, README "ALU Layout" and "Instruction Throughputs", M1 / A15 and later) lists
``LSHIFT32`` and ``CONVERT(F->I), CONVERT(I->F)`` on the one "integer and complex math pipeline" at 4 cycles a
throughput (``CONVERT(F->I32)``: throughput 4), where FADD / FMUL / FFMA and the bitwise ops issue one a cycle on the four
FP32 / integer pipelines. Converting a float to a half is not on that pipeline ("most pipelines can accept 16-bit operands
or write 16-bit results, with zero additional cost")."""

_METAL_DEQUANT_OPS: dict[str, tuple[float, float, float]] = {
    "F16": (2, 0, 0), "F32": (4, 1, 0), "Q4_0": (8, 2.5, 1), "Q4_1": (8, 2.5, 1), "Q8_0": (2, 2, 1), "Q2_K": (10, 3, 1),
    "Q3_K": (32, 6, 1), "Q4_K": (22, 3, 1), "Q5_K": (26, 7, 1), "Q6_K": (28, 6, 2)}
"""Per ``dequantize_<type>`` call of 16 weights: (setup instructions, full-rate instructions a weight, shifts and int ->
float conversions a weight, at :data:`METAL_QUARTER_RATE`); :data:`METAL_DEQUANT_SLOTS` sums them."""

METAL_DEQUANT_SLOTS: dict[str, float] = {t: (setup + 16 * (full + METAL_QUARTER_RATE * quarter)) / 16 + 1
                                         for t, (setup, full, quarter) in _METAL_DEQUANT_OPS.items()}
"""Lane-instructions per weight that Metal's batched matmul (``kernel_mul_mm`` in ggml-metal.metal, the Sept 2023 form:
64 x 32 tiles, 128 threads) spends putting a weight into threadgroup memory: each thread calls ``dequantize_<type>``
for 16 weights and stores them to threadgroup memory. Counted from the source, one operation one instruction, as
(setup of one call + 16 x the loop body) / 16 + 1 store, where a shift or an integer-to-float conversion counts
:data:`METAL_QUARTER_RATE` (the integer and complex pipeline) and every other operation one:

* F16: two 16-byte loads of the ``half4x4``, no arithmetic: 2/16 + 1 = 1.125; F32 four loads and 16 float -> half
  conversions (full rate): 2.25;
* Q4_0 / Q4_1: setup 8 (scale load, the two scales, offset, masks, pointer), per two weights a 16-bit load and per
  weight mask, multiply-add and the conversion of the masked integer to float: (8 + 16 x (2.5 + 4)) / 16 + 1 = 8;
* Q8_0: setup 2, per weight load, multiply and the conversion: (2 + 16 x (2 + 4)) / 16 + 1 = 7.125;
* Q2_K: setup about 10, per weight load, mask, multiply-add and the conversion: (10 + 16 x (3 + 4)) / 16 + 1 = 8.625;
* Q3_K: setup about 32 (two 6-bit scale halves joined, masks, coefficients), per weight load, mask, load of the high
  bits, mask, select, multiply-add and the conversion: (32 + 16 x (6 + 4)) / 16 + 1 = 13;
* Q4_K: setup about 22 (``get_scale_min_k4_just2``, scale and min), per weight load, mask, multiply-add and the
  conversion: (22 + 16 x (3 + 4)) / 16 + 1 = 9.375;
* Q5_K: setup about 26, per weight load, mask, load of the high bits, mask, select, add, multiply-add and the
  conversion: (26 + 16 x (7 + 4)) / 16 + 1 = 13.625;
* Q6_K: setup about 28, per weight two loads, two masks, or, multiply-add, the shift joining the high bits
  (``(qh[i] & kmask1) << 2`` or ``<< 4``) and the conversion: (28 + 16 x (6 + 2 x 4)) / 16 + 1 = 16.75.

The loop bodies were re-read for this count in a 2024 copy of ggml-metal.metal (the same ``dequantize_q4_0`` ...
``dequantize_q6_K`` forms: Q4_0 / Q4_1 scale by 1/16 and 1/256 instead of shifting, Q2_K and Q3_K by ``coef``, Q6_K
shifts ``qh[i] & kmask1`` left by 2 or 4). The shifts in a call's setup are counted at one slot. A threadgroup covers 32 columns (tokens, ``BLOCK_SIZE_N``) and
dequantizes its 64-row tile of the weight at every 32-deep step of K on the same ALUs that then run the simdgroup
multiply-accumulates (Apple GPUs have no separate matrix units: metal-benchmarks), so a weight is dequantized once per
32 tokens and these instructions add to the matmul's ALU time (:func:`~estimator.speed.roofline.op_seconds`). Types not
listed take the largest count."""


def _metal_dequant_slots(t: TensorInfo, n: int, elems: int) -> float:
    """Lane-instructions Metal's ``kernel_mul_mm`` spends dequantizing ``elems`` weights of ``t`` for ``n`` tokens."""
    return METAL_DEQUANT_SLOTS.get(t.ggml_type, max(METAL_DEQUANT_SLOTS.values())) * elems * -(-n // 32)


@dataclass
class _Side:
    ops: list[OpCost] = field(default_factory=list)
    weight_bytes: int = 0
    kv_bytes: int = 0
    alu: dict[OpCost, float] = field(default_factory=dict)  # lane-instructions beyond an op's FLOPs (Metal's in-kernel dequantization)
    link_bytes: int = 0  # bytes crossing a discrete GPU's host link in a step beside weights: embeddings in, logits out (:func:`_step`)
    syncs: int = 0  # crossings between the GPU's and the host's graph splits in a step (-nkvo: two a GPU layer, :data:`SPLIT_SYNC_S`)

    def merge(self, other: _Side) -> None:
        self.ops += other.ops
        self.weight_bytes += other.weight_bytes
        self.kv_bytes += other.kv_bytes
        self.alu.update(other.alu)


def _add_matmul(side: _Side, t: TensorInfo, n: int, run: LlamaCppRun, hardware: Hardware, share: float = 1.0) -> None:
    """``side`` gains the kernels multiplying ``n`` tokens by ``t`` (:func:`_matmul`) and, on Apple in batches, their
    in-kernel dequantization (:data:`METAL_DEQUANT_SLOTS`)."""
    ops = _matmul(t, n, run, hardware, share)
    side.ops += ops
    if hardware.kind is Kind.APPLE and n > 1:
        for op in ops:
            if op.name.startswith("mul_mat"):
                side.alu[op] = _metal_dequant_slots(t, n, op.flops // (2 * n))


def _step(tensors: Sequence[TensorInfo], hp: HParams, n: int, n_kv: int, run: LlamaCppRun, gpu: Hardware, host: Hardware,
          logits: int) -> tuple[_Side, _Side, int]:
    """One forward of ``n`` tokens over ``n_kv`` cells: the GPU's ops, the host's ops, and the weight bytes copied to the GPU
    over its host link (the GPU side's ``link_bytes`` holds the embeddings in and the logits out)."""
    inputs, layers, output = _groups(tensors, hp)
    on_cpu = _layers_on_cpu(hp, run)
    dev, cpu = _Side(), _Side()
    copied = 0
    for t in inputs:  # get_rows: one row per token, on the CPU (the input layer stays there)
        if t.name == "token_embd.weight":
            row = t.n_bytes // max(_elements(t) // t.shape[0], 1)
            cpu.ops.append(OpCost("get_rows (token_embd)", 0, n * row, n * hp.n_embd * _F32, "fp32", formula="elementwise"))
            cpu.weight_bytes += n * row
            if gpu.kind is Kind.GPU and (on_cpu < hp.n_layer or n >= 32):  # the hidden state crosses to the GPU once
                dev.link_bytes += n * hp.n_embd * _F32
    for il in range(hp.n_layer):
        layer = layers.get(il, [])
        side = cpu if il < on_cpu else dev
        weights_hw = host if il < on_cpu else gpu
        if il < on_cpu and n >= 32 and gpu.kind is Kind.GPU:  # llama.cpp offloads big batches: weights copied to the GPU
            side, weights_hw = dev, gpu
            copied += sum(t.n_bytes for t in layer if _is_matrix(t))
        for t in layer:
            if _is_matrix(t):
                share = hp.n_expert_used / hp.n_expert if "_exps." in t.name and hp.n_expert else 1.0
                _add_matmul(side, t, n, run, weights_hw, share)
                side.weight_bytes += int(t.n_bytes * share) if n == 1 else t.n_bytes
        fixed = _layer_fixed(hp, il, n, layer, run)
        att_side = (cpu if il < on_cpu else dev) if run.offload_kqv else cpu
        ops, kv = _attention(hp, il, n, n_kv, run, cuda=_fast_fp16(gpu) and att_side is dev)
        if not run.offload_kqv and side is dev and ops and gpu.kind is Kind.GPU:  # -nkvo: the cache store and attention on the host
            att_side.ops += [op for op in fixed if op.name in ("cpy k", "cpy v")]
            fixed = [op for op in fixed if op.name not in ("cpy k", "cpy v")]
            dev.link_bytes += _nkvo_link_bytes(hp, il, n)
            dev.syncs += 2
        side.ops += fixed
        att_side.ops += ops
        att_side.kv_bytes += kv
    head = dev if run.n_gpu_layers != 0 else cpu
    head_hw = gpu if head is dev else host
    for t in output:
        if _is_matrix(t):
            _add_matmul(head, t, logits, run, head_hw)
            head.weight_bytes += t.n_bytes
            if head is dev and gpu.kind is Kind.GPU:  # the logits, F32, copied to the host's buffer after the graph
                dev.link_bytes += logits * t.shape[1] * _F32
        else:
            head.ops.append(_small("output norm", n, hp.n_embd, 3))
    return dev, cpu, copied


def _nkvo_link_bytes(hp: HParams, il: int, n: int) -> int:
    """-nkvo, one GPU layer, ``n`` tokens: Q, K and V of the new tokens to the host and the attention output back, F32."""
    q = hp.n_head[il] * hp.head_k[il]
    out = hp.n_head[il] * hp.head_v[il]
    return n * (q + hp.n_embd_k_gqa(il) + max(hp.n_embd_v_gqa(il), 1) + out) * _F32


def _time(side: _Side, phase: Phase, tokens: int, hw: Hardware, graphs: bool) -> PhaseTime | None:
    """The roofline time of one side's kernels: the CPU runs them in its own thread pool (no launch floor);
    a GPU with CUDA graphs at :data:`KERNEL_FLOOR_GRAPH_S` per kernel, else :data:`~estimator.speed.roofline.KERNEL_FLOOR_S`."""
    if not side.ops:
        return None
    cost = PhaseCost(phase, tuple(side.ops), tokens)
    floor = KERNEL_FLOOR_GRAPH_S if graphs and hw.kind is Kind.GPU else KERNEL_FLOOR_S
    return phase_time(cost, hw, launch_hidden=hw.kind is Kind.CPU, label=Label.MODELLED, kernel_floor=floor, alu_slots=side.alu)


def tg_cost(tensors: Sequence[TensorInfo], hp: HParams, context: int, run: LlamaCppRun = LlamaCppRun(),
            gpu: Hardware | None = None, host: Hardware | None = None) -> tuple[PhaseCost, PhaseCost]:
    """The (GPU, host) ops of generating one token with ``context`` tokens already in the cache."""
    gpu_hw = gpu or find_hardware("RTX 4090")
    host_hw = host or find_hardware(DEFAULT_HOST)
    dev, cpu, _ = _step(tensors, hp, 1, _pad(context + 1, run), run, gpu_hw, host_hw, 1)
    return PhaseCost(Phase.DECODE, tuple(dev.ops), 1), PhaseCost(Phase.DECODE, tuple(cpu.ops), 1)


def generation(tensors: Sequence[TensorInfo], hp: HParams, hardware: Hardware, *, n_gen: int = 128, depth: int = 0,
               run: LlamaCppRun = LlamaCppRun(), host: Hardware | None = None) -> LlamaCppSpeed:
    """tg: ``n_gen`` tokens generated after ``depth`` tokens of context (llama-bench ``tg N``: depth 0), timed at the mean context."""
    host_hw = host or (hardware if hardware.kind is not Kind.GPU else find_hardware(DEFAULT_HOST))
    context = depth + (n_gen - 1) // 2
    dev, cpu, _ = _step(tensors, hp, 1, _pad(context + 1, run), run, hardware, host_hw, 1)
    if hardware.kind is not Kind.GPU:  # Apple / CPU: one memory, one device
        dev.merge(cpu)
        cpu = _Side()
    # CUDA graphs: one captured graph per CUDA context in 2024's ggml-cuda, re-captured whenever the nodes differ and
    # disabled after 4 consecutive updates (``number_consecutive_updates >= 4``): -nkvo's alternating splits differ each call
    graphs = (run.cuda_graphs and not dev.syncs and hardware.vendor == "nvidia"
              and float(hardware.compute_capability or 0) >= 8.0)
    g, h = _time(dev, Phase.DECODE, 1, hardware, graphs), _time(cpu, Phase.DECODE, 1, host_hw, False)
    t_copy = dev.link_bytes / host_link(hardware) + dev.syncs * SPLIT_SYNC_S
    seconds = (g.seconds if g else 0.0) + (h.seconds if h else 0.0) + t_copy
    moved = (g.bytes_moved if g else 0) + (h.bytes_moved if h else 0)
    flops = (g.flops if g else 0) + (h.flops if h else 0)
    return LlamaCppSpeed(Phase.DECODE, 1 / seconds, n_gen, seconds * n_gen, g, h, t_copy * n_gen, dev.weight_bytes + cpu.weight_bytes,
                         dev.kv_bytes + cpu.kv_bytes, moved, flops, hardware.name,
                         notes=(f"at the mean context {context:,}; launch floor {'3.4 us (CUDA graphs)' if graphs else '3.8 us'} per kernel",))


def prompt(tensors: Sequence[TensorInfo], hp: HParams, hardware: Hardware, *, n_prompt: int = 512, depth: int = 0,
           run: LlamaCppRun = LlamaCppRun(), host: Hardware | None = None, restart_every: int = 0) -> LlamaCppSpeed:
    """pp: ``n_prompt`` tokens in micro-batches of ``run.n_ubatch`` after ``depth`` cached tokens (llama-bench ``pp N``: depth 0).

    ``restart_every``: the cache is cleared every so many tokens (llama-perplexity's chunks of ``-c``).
    """
    host_hw = host or (hardware if hardware.kind is not Kind.GPU else find_hardware(DEFAULT_HOST))
    seconds = transfer = 0.0
    moved = flops = weight = kv = 0
    g_last = h_last = None
    done = 0
    while done < n_prompt:
        n = min(run.n_ubatch, n_prompt - done)
        cached = depth + (done % restart_every if restart_every else done)
        last = done + n >= n_prompt
        logits = n if run.all_logits else (1 if last else 0)
        dev, cpu, copied = _step(tensors, hp, n, _pad(cached + n, run), run, hardware, host_hw, logits)
        if hardware.kind is not Kind.GPU:
            dev.merge(cpu)
            cpu = _Side()
        g, h = _time(dev, Phase.PREFILL, n, hardware, False), _time(cpu, Phase.PREFILL, n, host_hw, False)
        t_copy = (copied + dev.link_bytes) / host_link(hardware) + dev.syncs * SPLIT_SYNC_S
        seconds += (g.seconds if g else 0.0) + (h.seconds if h else 0.0) + t_copy
        transfer += t_copy
        moved += (g.bytes_moved if g else 0) + (h.bytes_moved if h else 0)
        flops += (g.flops if g else 0) + (h.flops if h else 0)
        weight, kv = dev.weight_bytes + cpu.weight_bytes, dev.kv_bytes + cpu.kv_bytes
        g_last, h_last = g or g_last, h or h_last
        done += n
    return LlamaCppSpeed(Phase.PREFILL, n_prompt / seconds, n_prompt, seconds, g_last, h_last, transfer, weight, kv,
                         moved // n_prompt, flops // n_prompt, hardware.name,
                         notes=(f"{-(-n_prompt // run.n_ubatch)} micro-batches of {run.n_ubatch}; quantized matmuls: {run.quant_gemm.value}",))


def speed(tensors: Sequence[TensorInfo], hp: HParams, hardware: Hardware, *, n_prompt: int = 512, n_gen: int = 128,
          run: LlamaCppRun = LlamaCppRun(), host: Hardware | None = None) -> tuple[LlamaCppSpeed, LlamaCppSpeed]:
    """llama-bench's two answers: ``pp n_prompt`` and ``tg n_gen`` (each from an empty cache)."""
    return (prompt(tensors, hp, hardware, n_prompt=n_prompt, run=run, host=host),
            generation(tensors, hp, hardware, n_gen=n_gen, run=run, host=host))


MEASURED_ERROR = {
    "tg": "bench.speed_accuracy on 44 public llama.cpp runs: median |error| 10.7%, 36 of 44 within +-20%",
    "pp": "bench.speed_accuracy on 48 public llama.cpp runs: median |error| 17.8%, 42 of 48 within +-35% (mostly over: see docs/speed.md)",
}
"""The bench's measured error beside each figure (``python -m bench.speed_accuracy``; bench/results/speed_accuracy.md)."""


def answer(tensors: Sequence[TensorInfo], hp: HParams, hardware: Hardware, *, n_gpu_layers: int, n_prompt: int, n_gen: int,
           n_ctx: int, flash_attn: bool, type_k: str = "f16", type_v: str = "f16") -> tuple[dict[str, object], str]:
    """The speed answer of one GGUF row (JSON ``rows[].speed``) and its one-line note, for today's llama.cpp: flash
    attention as asked, CUDA graphs, int8 tensor-core MMQ on NVIDIA GPUs from Turing (compute capability 7.5) on."""
    cc = float(hardware.compute_capability or 0)
    run = LlamaCppRun(flash_attn=flash_attn, type_k=type_k, type_v=type_v, n_gpu_layers=n_gpu_layers,
                      quant_gemm=QuantGemm.MMQ if cc >= 7.5 or hardware.vendor != "nvidia" else QuantGemm.DEQUANT)
    pp = prompt(tensors, hp, hardware, n_prompt=n_prompt, run=run)
    tg = generation(tensors, hp, hardware, n_gen=n_gen, depth=n_prompt, run=run)
    full = generation(tensors, hp, hardware, n_gen=1, depth=max(n_ctx - 1, 0), run=run)
    main = tg.gpu or tg.host
    assert main is not None
    out: dict[str, object] = {
        "engine": "llama.cpp", "hardware": hardware.name, "label": Label.MODELLED.value,
        "prompt_tokens": n_prompt, "prefill_tokens_per_second": round(pp.tokens_per_second, 1),
        "time_to_first_token_s": round(pp.seconds, 4),
        "generated_tokens": n_gen, "decode_tokens_per_second": round(tg.tokens_per_second, 1),
        "decode_tokens_per_second_at_full_context": round(full.tokens_per_second, 1), "n_ctx": n_ctx,
        "decode_bytes_per_token": tg.bytes_per_token, "decode_weight_bytes_per_token": tg.weight_bytes,
        "decode_kv_bytes_per_token": tg.kv_bytes, "decode_flops_per_token": tg.flops_per_token,
        "prefill_flops_per_token": pp.flops_per_token,
        "bandwidth_bytes_s": main.bandwidth_bytes_s, "peak_flops": (pp.gpu or pp.host or main).peak_flops,
        "n_gpu_layers": n_gpu_layers, "kernels_per_token": main.kernels + (tg.host.kernels if tg.host and tg.gpu else 0),
        "measured_error": dict(MEASURED_ERROR),
    }
    note = (f"speed on {hardware.name} (llama.cpp, modelled): prefill {pp.tokens_per_second:,.0f} tokens/s (time to first token "
            f"{pp.seconds:.3f} s for {n_prompt:,}), decode {tg.tokens_per_second:,.1f} tokens/s after it, "
            f"{full.tokens_per_second:,.1f} at the full context {n_ctx:,}; decode reads {tg.bytes_per_token:,} bytes a token "
            f"(weights {tg.weight_bytes:,} + KV {tg.kv_bytes:,}) at {main.bandwidth_bytes_s / 1e9:,.0f} GB/s achievable, prefill "
            f"{pp.flops_per_token:,} FLOPs a token at {out['peak_flops'] / 1e12:,.1f} TFLOP/s achievable "  # type: ignore[operator]
            f"({MEASURED_ERROR['tg'].split(': ', 1)[1]} for decode; docs/speed.md)")
    return out, note
