"""The speed stage's arithmetic, checked without timing anything (docs/speed.md).

* the hardware table: at least 60 entries, each with its vendor source, every name and alias
  resolving to its own entry, the fit's GPU list built from it (old entries unchanged), derived
  peaks equal to the whitepapers' stated ones, PyTorch's own device table (``torch._inductor``)
  agreeing where both list a device, Apple's working set equal to the values ggml-metal logged; a board power cap's
  SM clock against a capped RTX 3090's logged clock (and the bench passing each notebook's stated cap through);
* the roofline: hand-derived cases (compute-bound, memory-bound, the kernel floor, launches hidden);
* llama.cpp: the bytes one generated token reads are the GGUF tensors' bytes (one embedding row,
  every other matrix whole, an MoE's used experts) plus the KV cache read, counted here from the
  header's tensor infos and hyperparameters; the FLOPs are 2 x the weights multiplied;
* llama.cpp's kernels, counted by hand: ggml-cuda's ``quantize_q8_1`` before each quantized matmul and the cuBLAS
  path's conversions; Metal's in-kernel dequantization (instructions per weight once per 32 tokens); the 2024 graphs'
  QKV copies and unfused gated activation;
* the CLI: a GGUF row on ``--gpu "M2 Max 96GB"`` carries the ``speed`` object with its inputs.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from estimator.errors import BadOptionError
from estimator.fit.gpus import GPUS, find_gpu
from estimator.gguf.header import GGUFHeader, parse_header
from estimator.gguf.hparams import hparams
from estimator.speed.cost import OpCost, Phase, PhaseCost
from estimator.speed.hardware import HARDWARE, Kind, apple_working_set, find_hardware, power_capped
from estimator.speed.llamacpp import (
    METAL_DEQUANT_SLOTS,
    METAL_QUARTER_RATE,
    SPLIT_SYNC_S,
    LlamaCppRun,
    QuantGemm,
    _step,
    generation,
    host_link,
    prompt,
    tg_cost,
)
from estimator.speed.roofline import (
    BANDWIDTH_FRACTION,
    BANDWIDTH_FRACTION_ARCH,
    FLOPS_FRACTION,
    KERNEL_FLOOR_S,
    achievable_bandwidth,
    achievable_flops,
    op_seconds,
    phase_time,
)
from testkit.hub_process import REPO_ROOT, hub_env

DATA = Path(__file__).parent / "hub_data" / "gguf"
MANIFEST: dict[str, dict[str, int]] = json.loads((DATA / "manifest.json").read_text())
BIG = "estimator-test/Meta-Llama-3.1-8B-Instruct-GGUF"
GiB = 2**30


def _header(repo: str, name: str) -> GGUFHeader:
    size = MANIFEST[repo][name]
    header = parse_header((DATA / repo / f"{name}.header").read_bytes() + bytes(64), size, name)
    assert header is not None
    return header


def _key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower().removeprefix("nvidia").removeprefix("apple"))


# ------------------------------------------------------------------ the hardware table

def test_hardware_table_has_sixty_entries_each_with_a_source_and_names_that_resolve() -> None:
    assert len(HARDWARE) >= 60
    seen: dict[str, str] = {}
    for hw in HARDWARE:
        assert hw.source.startswith("http") or "JEDEC" in hw.source, hw.name
        assert hw.memory_bytes > 0 and hw.bandwidth_bytes_s > 0 and hw.flops.get("fp32", 0) > 0, hw.name
        assert find_hardware(hw.name) is hw
        for name in (hw.name, *hw.aliases):
            assert seen.setdefault(_key(name), hw.name) == hw.name, f"{name} names both {seen[_key(name)]} and {hw.name}"
    kinds = {hw.kind for hw in HARDWARE}
    assert kinds == {Kind.GPU, Kind.APPLE, Kind.CPU}
    for wanted in ("RTX 3060", "RTX 3090 Ti", "RTX 4060", "RTX 4080", "RTX 5060", "RTX 5090", "RTX A4000", "RTX A6000", "RTX 6000 Ada",
                   "RTX PRO 6000 Blackwell", "V100 16GB", "T4", "A10", "A10G", "A30", "A40", "A100 40GB", "A100 80GB", "L4", "L40", "L40S",
                   "H100 PCIe", "H100 80GB", "H100 NVL", "H200", "B200", "GB200", "MI100", "MI210", "MI250X", "MI300X", "MI325X",
                   "RX 7900 XTX", "RX 7900 XT", "RX 7800 XT", "RX 9070 XT", "M1 8GB", "M2 Max 96GB", "M3 Ultra 512GB", "M4 Max 128GB"):
        find_hardware(wanted)
    with pytest.raises(BadOptionError, match="not hardware we know"):
        find_hardware("RTX 9999")


def test_fit_list_is_the_hardware_table_with_the_driver_figures_kept() -> None:
    measured = json.loads((REPO_ROOT / "estimator" / "fit" / "data" / "gpus.json").read_text())["gpus"]
    for entry, gpu in zip(measured, GPUS, strict=False):  # the driver-read GPUs first, unchanged
        assert (gpu.name, gpu.total_bytes, gpu.aliases) == (entry["name"], entry["total_bytes"], tuple(entry["aliases"]))
    names = {g.name for g in GPUS}
    for hw in HARDWARE:
        if hw.kind is Kind.CPU:
            assert hw.name not in names
            continue
        gpu = find_gpu(hw.name)
        assert gpu.name == hw.name or _key(hw.name) in {_key(a) for a in gpu.aliases}, hw.name  # "A10" stays A10G's alias
    mac = find_gpu("M2 Max 96GB")
    assert mac.total_bytes == 72 * GiB and "working set" in mac.source
    assert find_gpu("Apple M1 8GB").total_bytes == 8 * GiB * 2 // 3


def test_serving_sm_counts_reach_the_new_gpus() -> None:
    from estimator.serving.sms import SM_COUNTS, sm_count

    assert sm_count("H100 80GB") == 132 and sm_count(None) == max(SM_COUNTS.values())  # as before
    assert sm_count("RTX 3060") == 28 and sm_count("L40S") == 142  # the data sheets' counts, from the hardware table
    for name, count in SM_COUNTS.items():
        assert find_hardware(name).compute_units == count, name


def test_apple_working_set_is_what_ggml_metal_logged() -> None:
    """``ggml_metal_init: recommendedMaxWorkingSetSize`` in public llama.cpp logs (MB = 10^6 bytes in newer builds, MiB in older)."""
    assert apple_working_set(16 * GiB) / 1e6 == pytest.approx(11453.25, abs=0.01)  # M1 Pro 16 GB
    assert apple_working_set(24 * GiB) / 1e6 == pytest.approx(17179.89, abs=0.03)  # M2 24 GB (the log reads 21 kB more)
    assert apple_working_set(32 * GiB) / 2**20 == pytest.approx(21845.34, abs=0.01)  # M2 Pro 32 GB
    assert apple_working_set(36 * GiB) / 1e6 == pytest.approx(28991.03, abs=0.01)  # M3 Max 36 GB
    assert apple_working_set(64 * GiB) / 2**20 == pytest.approx(49152.00, abs=0.01)  # M1 Max 64 GB


def test_derived_peaks_equal_the_whitepapers_and_pytorchs_device_table() -> None:
    """SMs x boost clock x per-SM rate reproduces the FP16-accumulate dense figures NVIDIA's whitepapers print."""
    assert find_hardware("RTX 4090").flops["fp16_acc16"] / 1e12 == pytest.approx(330.3, rel=0.002)  # Ada whitepaper, Table 1
    assert find_hardware("RTX 3090").flops["fp16_acc16"] / 1e12 == pytest.approx(142.3, rel=0.002)  # GA102 whitepaper
    assert find_hardware("RTX 6000 Ada").flops["fp8"] * 2 / 1e12 == pytest.approx(1457.0, rel=0.002)  # datasheet: FP8 with sparsity
    assert find_hardware("RTX A6000").flops["fp16"] * 2 / 1e12 == pytest.approx(309.7, rel=0.002)  # datasheet: tensor, sparse
    device_info = pytest.importorskip("torch._inductor.analysis.device_info")
    import torch

    for ours, theirs in (("H100 80GB", "NVIDIA H100"), ("A100 80GB", "NVIDIA A100")):
        info = device_info._device_mapping[theirs]
        hw = find_hardware(ours)
        assert hw.bandwidth_bytes_s == pytest.approx(info.dram_bw_gbs * 1e9)
        assert hw.flops["bf16"] == pytest.approx(info.tops[torch.bfloat16] / info.tops_sparsity_factor * 1e12, rel=0.005)


def test_a_power_cap_lowers_the_sm_clock_by_the_cube_root_and_leaves_the_memory() -> None:
    """``power_capped``: P ~ V^2 f with V ~ f, so the clock a cap leaves is (cap / board power)^(1/3) of the rated boost.
    Independent truth: a 350 W RTX 3090 capped at 315 W ran llama.cpp's pp8192 at a median SM clock of 1,635-1,650 MHz
    (ninfer-3090 PR #72, nvidia-smi at 2 Hz, three runs); the model's clock, 1,695 MHz (the data sheet's boost, the one the
    peaks are computed at) x the share, falls in that range. The memory clock stayed at 9,501 MHz in every sample: the
    bandwidth is unchanged. A cap at or above the board power changes nothing; a card without a stated board power
    cannot be capped."""
    hw = find_hardware("RTX 3090")
    assert hw.board_power_w == 350  # NVIDIA's 30-series spec page: Graphics Card Power 350 W
    capped = power_capped(hw, 315)
    share = capped.flops["fp16"] / hw.flops["fp16"]
    assert 1635 <= 1695 * share <= 1650
    assert all(capped.flops[k] / hw.flops[k] == pytest.approx(share) for k in hw.flops)
    assert capped.bandwidth_bytes_s == hw.bandwidth_bytes_s and capped.memory_bytes == hw.memory_bytes
    assert power_capped(hw, 230).flops["fp16"] / hw.flops["fp16"] == pytest.approx((230 / 350) ** (1 / 3))
    assert power_capped(hw, 370) is hw and power_capped(hw, 350) is hw
    with pytest.raises(ValueError, match="board power"):
        power_capped(find_hardware("H100 SXM"), 300)


def test_the_bench_runs_a_case_at_the_power_cap_its_notebook_states() -> None:
    """bench.speed_accuracy passes each run's stated board power limit through (POWER_CAPS, from the notebooks'
    nvidia-smi; a held-out run's ``settings.power_limit_w`` first); only a cap below the card's board power changes it."""
    from bench.speed_accuracy import LLAMA3_8B, _fig

    def ratio(path: str) -> float:
        r = {"id": "x", "source": {"path": path}}
        fig = _fig(r, "Meta-Llama-3-8B", LLAMA3_8B, "F16", "RTX 3090", 2843, "pp", 512, 1.0, None)
        assert fig.estimate is not None
        return fig.estimate

    capped, first = ratio("LLaMA 3/walkthrough_with_SSH.ipynb"), ratio("LLaMA 3/Gaming GPUs/3090_v3.ipynb")
    assert capped < first and first == ratio("elsewhere")  # 230 W of 350 lowers it; 370 W of 350 does not


# ------------------------------------------------------------------ the roofline, by hand

def test_achievable_bandwidth_is_the_cited_microbenchmark_on_the_card_it_measured() -> None:
    """The bandwidth share is a published measurement, not a fit: on the cards the microbenchmarks ran on, the achievable
    bandwidth is the measured figure itself (clpeak, 32-bit loads, V100-SXM2: 767.48 GB/s; nvbench, 32-bit loads, RTX 4090:
    920.207 GB/s); another Ada card takes the RTX 4090's share, a card of an architecture with no measurement the V100's."""
    assert achievable_bandwidth(find_hardware("V100 16GB")) == pytest.approx(767.48e9)
    assert achievable_bandwidth(find_hardware("RTX 4090")) == pytest.approx(920.207e9)
    assert achievable_bandwidth(find_hardware("RTX 4070 Ti")) == pytest.approx(504.2e9 * 920.207 / 1008)
    assert achievable_bandwidth(find_hardware("RTX 3090")) == pytest.approx(936.2e9 * 767.48 / 900)
    assert BANDWIDTH_FRACTION_ARCH == {"8.9": 920.207 / 1008}


def test_roofline_takes_the_larger_of_compute_and_memory_per_op() -> None:
    a100 = find_hardware("A100 80GB")
    bw, peak = 2039e9 * BANDWIDTH_FRACTION[Kind.GPU], 312e12 * FLOPS_FRACTION["nvidia"]
    matmul = OpCost("aten.mm.default", 2 * 4096**3, 3 * 4096 * 4096 * 2 // 3 * 2, 4096 * 4096 * 2, "bfloat16")  # compute-bound
    add = OpCost("aten.add.Tensor", 10**8, 8 * 10**8, 4 * 10**8, "float32")  # memory-bound
    tiny = OpCost("aten.mul.Tensor", 64, 256, 256, "float32")  # below the launch floor
    t = phase_time(PhaseCost(Phase.FORWARD, (matmul, add, tiny), tokens=4096), a100, launch_hidden=False)
    mm = 2 * 4096**3 / peak
    ad = 12e8 / bw
    ti = 512 / bw
    assert t.compute_seconds == pytest.approx(mm + 1e8 / (19.5e12 * 0.8) + 64 / (19.5e12 * 0.8))
    assert t.memory_seconds == pytest.approx((matmul.bytes_read + matmul.bytes_written) / bw + ad + ti)
    assert t.launch_seconds == pytest.approx(KERNEL_FLOOR_S - ti)
    assert t.seconds == pytest.approx(mm + ad + KERNEL_FLOOR_S)
    assert t.bandwidth_bytes_s == pytest.approx(bw) and t.peak_flops == pytest.approx(peak) and t.label.value == "roofline"
    hidden = phase_time(PhaseCost(Phase.FORWARD, (matmul, add, tiny), tokens=4096), a100, launch_hidden=True)
    assert hidden.launch_seconds == 0 and hidden.seconds == pytest.approx(mm + ad + ti)
    assert (t.flops, t.kernels) == (matmul.flops + add.flops + tiny.flops, 3)


# ------------------------------------------------------------------ llama.cpp: bytes and FLOPs per token from the GGUF

@pytest.mark.parametrize(("repo", "name"), [(BIG, "Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf"), ("estimator-test/gguf-only", "tiny-Q8_0.gguf"),
                                            ("estimator-test/gguf-qwen3moe", "tiny-qwen3moe-Q4_K_M.gguf")])
@pytest.mark.parametrize("flash", [True, False])
def test_decode_reads_the_tensors_bytes_plus_the_kv_cache(repo: str, name: str, flash: bool) -> None:
    header = _header(repo, name)
    hp = hparams(header)
    meta = header.metadata
    arch = meta["general.architecture"]
    n_layer, n_embd = meta[f"{arch}.block_count"], meta[f"{arch}.embedding_length"]
    n_head, n_head_kv = meta[f"{arch}.attention.head_count"], meta[f"{arch}.attention.head_count_kv"]
    head = meta.get(f"{arch}.attention.key_length", n_embd // n_head)
    n_expert, n_used = meta.get(f"{arch}.expert_count", 0), meta.get(f"{arch}.expert_used_count", 0)
    context = 1000
    cells = -(-(context + 1) // (256 if flash else 32)) * (256 if flash else 32)
    kv = n_layer * cells * 2 * n_head_kv * head * 2 * (1 if flash else n_head // n_head_kv)  # f16 K and V rows
    weights = 0
    tied = not any(t.name == "output.weight" for t in header.tensors)
    for t in header.tensors:
        if len([d for d in t.shape if d > 1]) < 2:
            continue
        if t.name == "token_embd.weight":
            weights += t.n_bytes // t.shape[1] + (t.n_bytes if tied else 0)  # one row; the whole matrix again as a tied head
        else:
            weights += t.n_bytes * n_used // n_expert if "_exps." in t.name else t.n_bytes
    speed = generation(header.tensors, hp, find_hardware("RTX 4090"), n_gen=1, depth=context, run=LlamaCppRun(flash_attn=flash))
    assert speed.weight_bytes == weights
    assert speed.kv_bytes == kv
    gpu, host = tg_cost(header.tensors, hp, context, LlamaCppRun(flash_attn=flash))
    reads = {op.name.split(" ")[0] for op in gpu.ops + host.ops}
    assert {"mul_mat_vec", "get_rows"} <= reads
    matvec = [op for op in gpu.ops if op.name.startswith("mul_mat_vec")]
    multiplied = sum(t.shape[0] * t.shape[1] * (n_used if "_exps." in t.name else 1) for t in header.tensors
                     if len([d for d in t.shape if d > 1]) >= 2 and (t.name != "token_embd.weight" or tied))
    assert sum(op.flops for op in matvec) == 2 * multiplied  # 2 FLOPs per weight multiplied, one token
    assert speed.bytes_per_token >= weights + kv


def test_prompt_counts_every_micro_batch_and_offloaded_layers_cross_pcie() -> None:
    header = _header(BIG, "Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf")
    hp = hparams(header)
    gpu = find_hardware("RTX 3060")
    whole = prompt(header.tensors, hp, gpu, n_prompt=1024, run=LlamaCppRun())
    link = host_link(gpu)
    assert link == pytest.approx(31.5e9, rel=1e-3)  # PCIe 4.0 x16 (the RTX 3060's data sheet)
    logits = (hp.n_vocab + 1024 * hp.n_embd) * 4 / link  # the embeddings in and the last token's F32 logits out
    assert whole.transfer_seconds == pytest.approx(logits) and whole.tokens == 1024
    half = prompt(header.tensors, hp, gpu, n_prompt=1024, run=LlamaCppRun(n_gpu_layers=17))
    on_cpu = [t for t in header.tensors if t.name.startswith(tuple(f"blk.{i}." for i in range(16))) and len(t.shape) > 1]
    # two micro-batches, each copies them
    assert half.transfer_seconds == pytest.approx(2 * sum(t.n_bytes for t in on_cpu) / link + logits)
    slow = generation(header.tensors, hp, gpu, n_gen=16, run=LlamaCppRun(n_gpu_layers=17))
    fast = generation(header.tensors, hp, gpu, n_gen=16, run=LlamaCppRun())
    assert slow.host is not None and slow.tokens_per_second < fast.tokens_per_second
    assert slow.weight_bytes == fast.weight_bytes  # the same bytes, read from two memories


def test_the_embeddings_and_logits_cross_the_gpus_own_host_link_every_step() -> None:
    """Each step the token embeddings looked up on the host cross to the GPU (F32, n_embd a token) and the logits it asked
    for come back (F32, n_vocab a token): one token's in llama-bench, every token's in llama-perplexity (``all_logits``),
    over the link the GPU's data sheet states (a V100 PCIe and a T4: PCIe 3.0 x16, 15.75 GB/s each way; no statement:
    PCIe 4.0 x16); a Mac's unified memory copies nothing."""
    header = _header(BIG, "Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf")
    hp = hparams(header)
    v100 = find_hardware("V100 PCIe 16GB")
    gen3 = 8e9 * 16 * 128 / 130 / 8  # PCIe 3.0 x16 each way (PCI-SIG), the V100 PCIe's and T4's data sheets
    assert host_link(v100) == pytest.approx(gen3) and host_link(find_hardware("T4")) == pytest.approx(gen3)
    assert host_link(find_hardware("RTX 3060")) == pytest.approx(2 * gen3)  # PCIe 4.0 x16
    every = prompt(header.tensors, hp, v100, n_prompt=1024, run=LlamaCppRun(all_logits=True))
    assert every.transfer_seconds == pytest.approx(1024 * (hp.n_vocab + hp.n_embd) * 4 / gen3)
    last = prompt(header.tensors, hp, v100, n_prompt=1024, run=LlamaCppRun())
    assert last.transfer_seconds == pytest.approx((hp.n_vocab + 1024 * hp.n_embd) * 4 / gen3)
    tg = generation(header.tensors, hp, v100, n_gen=16, run=LlamaCppRun())
    one = (hp.n_vocab + hp.n_embd) * 4 / gen3
    assert tg.transfer_seconds == pytest.approx(16 * one)
    assert tg.gpu is not None and tg.host is not None  # the token embedding is read on the host
    assert tg.seconds == pytest.approx(16 * (tg.gpu.seconds + tg.host.seconds + one))
    mac = find_hardware("M2 Ultra 192GB")
    assert prompt(header.tensors, hp, mac, n_prompt=512, run=LlamaCppRun(all_logits=True)).transfer_seconds == 0


def test_nkvo_runs_the_cache_store_and_attention_on_the_host_and_crosses_q_k_v_and_the_output() -> None:
    """``-nkvo`` (``offload_kqv=False``), counted by hand from the GGUF header: per GPU layer and token the new Q (n_head x
    head_k), K and V (n_head_kv x head) cross to the host as F32 and the attention output (n_head x head_v) comes back, with
    two split synchronisations; the host stores K and V (``cpy k`` / ``cpy v``) and runs KQ, softmax and KQV reading the
    whole cache (each KV head once per query head it serves), 2 x n_head x cells x (head_k + head_v) FLOPs a token, at
    its own RAM bandwidth and FLOP/s; the GPU keeps the weights and runs none of it."""
    header = _header(BIG, "Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf")
    hp = hparams(header)
    meta = header.metadata
    n_layer, n_embd = meta["llama.block_count"], meta["llama.embedding_length"]
    n_head, n_head_kv = meta["llama.attention.head_count"], meta["llama.attention.head_count_kv"]
    head = n_embd // n_head
    gpu, host = find_hardware("RTX 3060"), find_hardware("CPU DDR5-5600 2ch 64GB")
    context = 1000
    cells = -(-(context + 1) // 32) * 32
    nkvo = LlamaCppRun(offload_kqv=False)
    dev, cpu, copied = _step(header.tensors, hp, 1, cells, nkvo, gpu, host, 1)
    assert copied == 0
    per_layer = (n_head * head + 2 * n_head_kv * head + n_head * head) * 4  # Q, K, V in, the output back, F32
    assert dev.link_bytes == (n_embd + hp.n_vocab) * 4 + n_layer * per_layer
    assert dev.syncs == 2 * n_layer
    assert not [op for op in dev.ops if op.name.startswith(("mul_mat (KQ", "soft_max", "cpy k", "cpy v"))]
    names = [op.name for op in cpu.ops]
    for name in ("mul_mat (KQ)", "soft_max_ext", "mul_mat (KQV)", "cpy k", "cpy v"):
        assert names.count(name) == n_layer
    kv = n_layer * cells * 2 * n_head_kv * head * 2 * (n_head // n_head_kv)  # f16 K and V rows, once per query head
    assert cpu.kv_bytes == kv and dev.kv_bytes == 0
    att = [op for op in cpu.ops if op.name.startswith("mul_mat (KQ")]
    assert sum(op.flops for op in att) == n_layer * 2 * n_head * cells * 2 * head
    kq = next(op for op in att if op.name == "mul_mat (KQ)")
    assert kq.bytes_read == cells * n_head_kv * head * 2 * (n_head // n_head_kv) + n_head * head * 4  # K, then Q (F32)
    # the GPU side keeps every weight; with the KV offloaded nothing but the embeddings and logits cross
    on, _, _ = _step(header.tensors, hp, 1, cells, LlamaCppRun(), gpu, host, 1)
    assert dev.weight_bytes == on.weight_bytes and on.link_bytes == (n_embd + hp.n_vocab) * 4 and on.syncs == 0
    # the answer: host time at the host's own bandwidth and FLOP/s, the crossings at the GPU's host link
    tg = generation(header.tensors, hp, gpu, n_gen=2 * context + 1, depth=0, run=nkvo, host=host)
    assert tg.host is not None and tg.gpu is not None
    assert tg.host.bandwidth_bytes_s == pytest.approx(achievable_bandwidth(host))
    assert tg.transfer_seconds == pytest.approx((2 * context + 1) * (dev.link_bytes / host_link(gpu) + 2 * n_layer * SPLIT_SYNC_S))
    assert tg.kv_bytes == kv
    assert tg.tokens_per_second < generation(header.tensors, hp, gpu, n_gen=2 * context + 1, run=LlamaCppRun(), host=host).tokens_per_second
    assert achievable_flops(host, "fp16") == achievable_flops(host, "fp32")  # a CPU entry states FP32 only: F16 KQ at that rate


def test_cuda_quantizes_the_activations_and_cublas_converts_around_its_gemm() -> None:
    """ggml-cuda's kernels around a matmul, counted by hand from the tensors: ``ggml_cuda_op_mul_mat`` quantizes the F32
    input to ``block_q8_1`` (36 bytes per 32 values) once per quantized ``mul_mat`` (MMVQ at batch 1, MMQ in batches);
    ``ggml_cuda_op_mul_mat_cublas`` dequantizes the weight to F16, converts the input to F16, runs the GEMM into F16 and
    converts the result back to F32. Metal multiplies F32 activations directly (no quantize kernel)."""
    header = _header(BIG, "Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf")
    hp = hparams(header)
    mats = [t for t in header.tensors if len([d for d in t.shape if d > 1]) >= 2 and t.name != "token_embd.weight"]
    quantized = [t for t in mats if t.ggml_type not in ("F16", "F32", "BF16")]
    assert quantized
    gpu, _ = tg_cost(header.tensors, hp, 100, LlamaCppRun(), gpu=find_hardware("RTX 3090"))
    q81 = [op for op in gpu.ops if op.name == "quantize_q8_1"]
    assert len(q81) == len(quantized)
    assert sum(op.bytes_read for op in q81) == sum(4 * t.shape[0] for t in quantized)
    assert sum(op.bytes_written for op in q81) == sum(t.shape[0] * 36 // 32 for t in quantized)
    mac, _ = tg_cost(header.tensors, hp, 100, LlamaCppRun(), gpu=find_hardware("M2 Max 96GB"))
    assert not [op for op in mac.ops if op.name == "quantize_q8_1"]
    n = 512
    one_layer = [t for t in quantized if t.name.startswith("blk.0.")]
    for gemm in (QuantGemm.DEQUANT, QuantGemm.MMQ):
        dev, _, _ = _step(header.tensors, hp, n, n, LlamaCppRun(quant_gemm=gemm), find_hardware("RTX 3090"), find_hardware("RTX 3090"), 1)
        names = [op.name for op in dev.ops]
        in_layers = len([t for t in quantized if t.name.startswith("blk.")])  # the output head multiplies the last token alone
        assert names.count("quantize_q8_1") == len(quantized) - in_layers * (gemm is QuantGemm.DEQUANT)
        if gemm is QuantGemm.DEQUANT:
            assert names.count("cublas gemm (F16)") == names.count("to_fp16 (src1)") == names.count("to_fp32 (dst)") == in_layers
            to32 = [op for op in dev.ops if op.name == "to_fp32 (dst)"][: len(one_layer)]
            assert [(op.bytes_read, op.bytes_written) for op in to32] == [(n * t.shape[1] * 2, n * t.shape[1] * 4) for t in one_layer]
        else:
            assert "cublas gemm (F16)" not in names
            mmq = [op for op in dev.ops if op.name.startswith("mul_mat_q")][: len(one_layer)]
            assert [op.bytes_read for op in mmq] == [t.n_bytes + n * t.shape[0] * 36 // 32 for t in one_layer]


def test_metal_batched_matmul_spends_alu_dequantizing_once_per_32_tokens() -> None:
    """Metal's ``kernel_mul_mm`` dequantizes each weight into threadgroup memory once per 32 tokens on the ALUs that run
    its multiply-accumulates: the lane-instructions per weight (METAL_DEQUANT_SLOTS, counted from ggml-metal.metal's
    ``dequantize_*``) x weights x ceil(n / 32) add 2 FLOPs' time each at the FP32 rate; a mat-vec (n = 1) gets none, and
    neither does CUDA (its quantized matmuls are modelled by their own kernels)."""
    header = _header("estimator-test/gguf-only", "tiny-Q8_0.gguf")
    hp = hparams(header)
    mac = find_hardware("M2 Ultra 192GB")
    n = 100  # 4 tiles of 32 tokens
    dev, _, _ = _step(header.tensors, hp, n, 128, LlamaCppRun(), mac, mac, 1)
    mats = [t for t in header.tensors if t.name.startswith("blk.") and len([d for d in t.shape if d > 1]) >= 2]
    dequantizing = [op for op in dev.ops if op in dev.alu]  # in order: layer by layer, tensor by tensor
    assert [dev.alu[op] for op in dequantizing] == [METAL_DEQUANT_SLOTS[t.ggml_type] * t.shape[0] * t.shape[1] * 4 for t in mats]
    assert METAL_DEQUANT_SLOTS["Q8_0"] == (2 + 16 * (2 + METAL_QUARTER_RATE)) / 16 + 1  # setup 2, load-multiply and a quarter-rate convert a weight, the store
    op = next(iter(dev.alu))
    slots = dev.alu[op]
    compute, memory = op_seconds(op, mac, slots)
    peak = mac.peak_flops("fp32") * FLOPS_FRACTION["apple"]  # Apple: FP16 at the FP32 rate
    assert compute == pytest.approx(op.flops / (mac.peak_flops(op.dtype) * FLOPS_FRACTION["apple"]) + 2 * slots / peak)
    assert memory == op_seconds(op, mac)[1]
    one, _, _ = _step(header.tensors, hp, 1, 128, LlamaCppRun(), mac, mac, 1)
    assert not one.alu
    cuda, _, _ = _step(header.tensors, hp, n, 128, LlamaCppRun(), find_hardware("RTX 4090"), find_hardware("RTX 4090"), 1)
    assert not cuda.alu


def test_a_fused_qkv_is_split_by_three_copies_where_the_build_did() -> None:
    """llama.cpp's 2024 graph builders (``build_gptneox``, ``build_falcon``, ``build_phi2``) split a fused QKV projection by
    ``ggml_cont`` of three views, three kernels a layer copying Q, K and V (F32); today's builders take views (no kernel).
    Hand count on a fixture whose Q matrices are renamed ``attn_qkv``: 3 x layers more kernels, each reading and writing
    its part of the projection's output."""
    header = _header("estimator-test/gguf-only", "tiny-Q8_0.gguf")
    hp = hparams(header)
    fused = [dataclasses.replace(t, name=t.name.replace(".attn_q.", ".attn_qkv.")) for t in header.tensors]
    gpu = find_hardware("V100 PCIe 16GB")
    n = 7
    plain, _, _ = _step(fused, hp, n, 32, LlamaCppRun(), gpu, gpu, 1)
    split, _, _ = _step(fused, hp, n, 32, LlamaCppRun(qkv_cont=True), gpu, gpu, 1)
    unfused, _, _ = _step(header.tensors, hp, n, 32, LlamaCppRun(qkv_cont=True), gpu, gpu, 1)
    assert len(split.ops) - len(plain.ops) == 3 * hp.n_layer and len(unfused.ops) == len(plain.ops)
    copies = [op for op in split.ops if op.name.startswith("cont (") and "view" in op.name][:3]
    widths = [hp.n_head[0] * hp.head_k[0], hp.n_embd_k_gqa(0), hp.n_embd_v_gqa(0)]
    assert [(op.bytes_read, op.bytes_written) for op in copies] == [(4 * n * w, 4 * n * w) for w in widths]


def test_a_gated_ffn_is_two_kernels_before_the_glu_ops() -> None:
    """Before ggml's GLU ops (June 2025) ``llm_build_ffn`` ran a gated FFN as ``ggml_silu(gate)`` (read and write n_ff
    values a token) then ``ggml_mul(., up)`` (read two, write one); since, one ``swiglu`` kernel (read two, write one).
    Hand count on Llama 3.1 8B (gated, n_ff from the ffn_up tensor): one kernel more a layer, 2 x n_ff x 4 bytes more a token."""
    header = _header(BIG, "Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf")
    hp = hparams(header)
    gpu = find_hardware("RTX 3090")
    n_ff = next(t.shape[1] for t in header.tensors if t.name == "blk.0.ffn_up.weight")
    fused, _, _ = _step(header.tensors, hp, 1, 32, LlamaCppRun(), gpu, gpu, 1)
    split, _, _ = _step(header.tensors, hp, 1, 32, LlamaCppRun(fused_glu=False), gpu, gpu, 1)
    assert len(split.ops) - len(fused.ops) == hp.n_layer
    moved = sum(op.bytes_read + op.bytes_written for op in split.ops) - sum(op.bytes_read + op.bytes_written for op in fused.ops)
    assert moved == hp.n_layer * 2 * n_ff * 4
    act = [op for op in split.ops if op.name.startswith(("activation", "mul (gate"))][:2]
    assert [(op.bytes_read, op.bytes_written) for op in act] == [(4 * n_ff, 4 * n_ff), (8 * n_ff, 4 * n_ff)]


def test_attention_runs_through_batched_cublas_a_batch_always_one_token_before_pr_10318() -> None:
    """llama.cpp before PR #10318 sends one token's F16 KQ and KQV on a GPU with fast FP16 to
    ``ggml_cuda_mul_mat_batched_cublas``: Q (then the soft_max output) converted to F16, ``k_compute_batched_ptrs`` where
    K / V broadcast over grouped query heads (``r2 > 1``, ``cublasGemmBatchedEx``; none for one K / V head a query head,
    ``cublasGemmStridedBatchedEx``), the GEMM into F16 and the result converted to F32. Hand count: 3 kernels a matmul
    more for grouped-query attention (Llama 3 8B), 2 without (OpenLLaMA 7B); the GEMMs' FLOPs and K / V reads unchanged;
    the conversions' bytes as written; nothing changes on Metal or for -nkvo's host attention, and the bench asks for it
    by build and compute capability. A batch takes that path in every build: Q permuted to ``[head, tokens, n_head]`` is not
    contiguous across heads for 2+ tokens, so its KQ always builds the pointer arrays; the KQ result is written in F16 and
    converted to F32 (8 bytes a score where an F32 write is 4); Metal and a quantized K cache take other kernels."""
    from bench.speed_accuracy import LLAMA3_8B, MMV_BUILD, OPEN_LLAMA_7B, _run, model_hparams, tensors

    gpu = find_hardware("RTX 3090")
    for arch, extra in ((LLAMA3_8B, 6), (OPEN_LLAMA_7B, 4)):
        ts = tensors(arch, "Q4_K_M")
        hp = model_hparams(arch, ts)
        cells = 1024
        one, _, _ = _step(ts, hp, 1, cells, LlamaCppRun(), gpu, gpu, 1)
        batched, _, _ = _step(ts, hp, 1, cells, LlamaCppRun(kq_batched_cublas=True), gpu, gpu, 1)
        assert len(batched.ops) - len(one.ops) == extra * hp.n_layer
        assert batched.kv_bytes == one.kv_bytes
        gemms = [op for op in batched.ops if op.name.startswith("cublas batched gemm")]
        matmuls = [op for op in one.ops if op.name in ("mul_mat (KQ)", "mul_mat (KQV)")]
        assert [op.flops for op in gemms] == [op.flops for op in matmuls]
        heads, head = hp.n_head[0], hp.head_k[0]
        scores, q = heads * cells, heads * head
        names = [op.name for op in batched.ops]
        first = names.index("to_fp16 (Q)")
        ptrs = ["k_compute_batched_ptrs"] if hp.n_head_kv[0] != heads else []
        assert names[first:first + 8 + 2 * len(ptrs)] == ["to_fp16 (Q)", *ptrs, "cublas batched gemm (KQ)", "to_fp32 (KQ)", "soft_max_ext",
                                                           "to_fp16 (KQ soft_max)", *ptrs, "cublas batched gemm (KQV)", "to_fp32 (KQV)",
                                                           "cont (permute)"]
        conv = {op.name: (op.bytes_read, op.bytes_written) for op in batched.ops[first:first + 10]}
        assert conv["to_fp16 (Q)"] == (4 * q, 2 * q) and conv["to_fp32 (KQ)"] == (2 * scores, 4 * scores)
        assert conv["to_fp16 (KQ soft_max)"] == (4 * scores, 2 * scores) and conv["to_fp32 (KQV)"] == (2 * q, 4 * q)
        slower = generation(ts, hp, gpu, n_gen=64, run=LlamaCppRun(kq_batched_cublas=True))
        assert slower.tokens_per_second < generation(ts, hp, gpu, n_gen=64, run=LlamaCppRun()).tokens_per_second
    mac = find_hardware("M2 Max 96GB")
    metal, _, _ = _step(ts, hp, 1, 256, LlamaCppRun(kq_batched_cublas=True), mac, mac, 1)
    assert len(metal.ops) == len(_step(ts, hp, 1, 256, LlamaCppRun(), mac, mac, 1)[0].ops)
    host = find_hardware("CPU DDR5-5600 2ch 64GB")
    _, nkvo, _ = _step(ts, hp, 1, 256, LlamaCppRun(kq_batched_cublas=True, offload_kqv=False), gpu, host, 1)
    assert "to_fp16 (Q)" not in [op.name for op in nkvo.ops]
    n, cells = 512, 1024  # a batch takes the same path in every build: the KQ's Q is not contiguous across heads for 2+ tokens
    for arch, ptrs in ((LLAMA3_8B, 2), (OPEN_LLAMA_7B, 1)):
        ts = tensors(arch, "Q4_K_M")
        hp = model_hparams(arch, ts)
        batch, _, _ = _step(ts, hp, n, cells, LlamaCppRun(), gpu, gpu, 1)
        names = [op.name for op in batch.ops]
        assert names.count("k_compute_batched_ptrs") == ptrs * hp.n_layer and names.count("to_fp32 (KQ)") == hp.n_layer
        to32 = next(op for op in batch.ops if op.name == "to_fp32 (KQ)")
        assert (to32.bytes_read, to32.bytes_written) == (n * hp.n_head[0] * cells * 2, n * hp.n_head[0] * cells * 4)
        metal_batch, _, _ = _step(ts, hp, n, cells, LlamaCppRun(), mac, mac, 1)
        q8_cache, _, _ = _step(ts, hp, n, cells, LlamaCppRun(type_k="q8_0"), gpu, gpu, 1)
        assert not [op for op in metal_batch.ops + q8_cache.ops if op.name.startswith(("to_fp32 (KQ)", "k_compute"))]
    assert _run(gpu, 2824).kq_batched_cublas and _run(find_hardware("V100 PCIe 16GB"), 1832).kq_batched_cublas
    assert not _run(find_hardware("V100 PCIe 16GB"), 4424).kq_batched_cublas and 2824 < MMV_BUILD < 4424
    assert not _run(mac, 1200).kq_batched_cublas


# ------------------------------------------------------------------ the front

def test_cli_prints_the_speed_with_its_inputs(hub_server: str) -> None:
    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "estimator", BIG, "--mode", "inference", "--gguf-file", "Q4_K_M", "--ctx", "4096", *args],
                              capture_output=True, text=True, cwd=REPO_ROOT, env=hub_env(hub_server), timeout=300)

    done = cli("--gpu", "M2 Max 96GB", "--format", "json")
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout)["rows"]
    speed = row["speed"]
    header = _header(BIG, "Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf")
    expected = generation(header.tensors, hparams(header), find_hardware("M2 Max 96GB"), n_gen=128, depth=512,
                          run=LlamaCppRun(flash_attn=True, n_gpu_layers=33))
    assert speed["label"] == "modelled" and speed["hardware"] == "M2 Max 96GB" and speed["engine"] == "llama.cpp"
    assert speed["decode_weight_bytes_per_token"] == expected.weight_bytes
    assert speed["decode_kv_bytes_per_token"] == expected.kv_bytes
    assert speed["decode_tokens_per_second"] == pytest.approx(expected.tokens_per_second, abs=0.06)
    assert speed["bandwidth_bytes_s"] == pytest.approx(400e9 * BANDWIDTH_FRACTION[Kind.APPLE])
    assert speed["prompt_tokens"] == 512 and speed["generated_tokens"] == 128 and speed["n_ctx"] == 4096
    assert row["offload"]["n_gpu_layers"] == 33 and any("71.58 GiB usable" in note for note in row["notes"])
    table = cli("--gpu", "RTX 4090")
    assert table.returncode == 0 and "speed on RTX 4090 (llama.cpp, modelled)" in table.stdout and "bytes a token" in table.stdout
    memory_only = cli("--gpu-memory", "24GiB", "--format", "json")
    assert memory_only.returncode == 0 and "speed" not in json.loads(memory_only.stdout)["rows"][0]
