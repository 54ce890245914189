"""How close is the llama.cpp speed model to measured speeds? ``python -m bench.speed_accuracy``

Reads every case of ``bench/data/speed_runs.jsonl`` (a copy of ``../shared/speed-runs/runs.jsonl``; ``SPEED_RUNS=path``
reads another file of the same form, e.g. held-out runs):
llama.cpp's CI logs and llama-bench tables by other people, each with its model, GPU, build and
settings. For each measured figure (``pp N``: prompt processing of N tokens, ``tg N``: generation
of N tokens, tokens/s) it builds the model's GGUF tensor list from the hyperparameters the case
prints (architecture, layers, widths, heads, vocabulary) and llama.cpp's quantization recipe of the
file type (:func:`tensors`: which tensors a Q4_K_M file holds in Q6_K...), checks the tensor bytes
against the model size llama.cpp printed, and asks :mod:`estimator.speed.llamacpp` for the speed on
that hardware (:mod:`estimator.speed.hardware`) with the case's settings (flash attention off,
ubatch 512, the build's quantized-matmul path and CUDA graphs).

Prints estimate / measured per figure, the median |error| and the spread per phase, how many
figures are within the targets (tg +-20 %, pp +-35 %), and writes ``bench/results/speed_accuracy.md``.
No constant of the model is fitted to these numbers (``estimator/speed/roofline.py`` cites each).
"""

from __future__ import annotations

import json
import os
import re
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from estimator.gguf.header import GGUFHeader, TensorInfo
from estimator.gguf.hparams import HParams, hparams
from estimator.speed.hardware import Hardware, find_hardware, power_capped
from estimator.speed.llamacpp import LlamaCppRun, QuantGemm, generation, prompt

ROOT = Path(__file__).resolve().parent.parent
# a copy of ../shared/speed-runs/runs.jsonl (public measurements, each with its source); SPEED_RUNS=path runs other cases
RUNS = Path(os.environ.get("SPEED_RUNS", ROOT / "bench" / "data" / "speed_runs.jsonl"))
RESULTS = ROOT / "bench" / "results" / "speed_accuracy.md"
TARGET = {"tg": 0.20, "pp": 0.35}
PEERS = ("llmfit: estimate/measured median 0.87, 0.67-1.19 per hardware, '+-30%' in its UI; "
         "inference-sim (roofline simulator): decode-latency error 36%")


# ------------------------------------------------------------------ models from their printed hyperparameters

@dataclass(frozen=True)
class Arch:
    """A model as llama.cpp printed it: architecture and sizes."""

    arch: str
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    n_ff: int
    n_vocab: int
    n_ctx_train: int


PYTHIA_2_8B = Arch("gptneox", 32, 2560, 32, 32, 10240, 50304, 2048)  # printed by the CI logs (n_ff = 4 x n_embd, GPT-NeoX)
OPEN_LLAMA_7B = Arch("llama", 32, 4096, 32, 32, 11008, 32000, 2048)  # printed by the CI logs; n_ff: LLaMA-7B's
LLAMA_7B = Arch("llama", 32, 4096, 32, 32, 11008, 32000, 2048)  # LLaMA(-2) 7B, 6.74 B params as llama-bench prints
CODELLAMA_7B = Arch("llama", 32, 4096, 32, 32, 11008, 32016, 16384)  # CodeLlama-7b-hf config.json (vocab 32016)
LLAMA3_8B = Arch("llama", 32, 4096, 32, 8, 14336, 128256, 8192)  # Meta-Llama-3-8B config.json; 8.03 B params as printed


def _more_bits(i: int, n: int) -> bool:
    """llama.cpp's ``use_more_bits``: the first and last eighth of the layers and every third between."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def _pick(ftype: str, name: str, layer: int, a: Arch) -> str:
    """The ggml type llama.cpp's ``llama_tensor_get_type`` gives a 2-D weight for a file type (2023-2025 builds)."""
    base = {"F16": "F16", "Q8_0": "Q8_0", "Q4_0": "Q4_0", "Q4_1": "Q4_1", "Q4_K_M": "Q4_K", "Q4_K_S": "Q4_K", "Q5_K_M": "Q5_K",
            "Q5_K_S": "Q5_K", "Q6_K": "Q6_K", "Q2_K": "Q2_K"}[ftype]
    if ftype in ("F16", "Q8_0"):
        return base
    if name == "output.weight":
        return "Q6_K"
    n = a.n_layer
    gqa = a.n_head // a.n_head_kv
    if ".attn_v." in name:
        if ftype == "Q2_K":
            return "Q4_K" if gqa >= 4 else "Q3_K"
        if ftype in ("Q4_K_M", "Q5_K_M") and _more_bits(layer, n):
            return "Q6_K"
        if ftype == "Q4_K_S" and layer < n // 8:
            return "Q5_K"
    if ".attn_qkv." in name:
        return {"Q4_K_M": "Q5_K", "Q5_K_M": "Q6_K"}.get(ftype, base)
    if ".ffn_down." in name:
        if ftype == "Q2_K":
            return "Q3_K"
        if ftype in ("Q4_K_M", "Q5_K_M") and _more_bits(layer, n):
            return "Q6_K"
        if ftype == "Q4_K_S" and layer < n // 8:
            return "Q5_K"
    if ".attn_output." in name and ftype == "Q2_K":
        return "Q3_K"
    return base


def _info(name: str, shape: tuple[int, ...], gtype: str) -> TensorInfo:
    block, size = GGML_QUANT_SIZES[GGMLQuantizationType[gtype]]
    n = 1
    for d in shape:
        n *= d
    return TensorInfo(name, gtype, shape, n // block * size)


def tensors(a: Arch, ftype: str) -> list[TensorInfo]:
    """The tensors of a GGUF file of ``a`` in ``ftype``, as convert_hf_to_gguf.py and llama-quantize lay them out."""
    e, f, v = a.n_embd, a.n_ff, a.n_vocab
    head = e // a.n_head

    def w(name: str, shape: tuple[int, int], layer: int = -1) -> TensorInfo:
        return _info(name, shape, _pick(ftype, name, layer, a))

    out = [w("token_embd.weight", (e, v))]
    for i in range(a.n_layer):
        b = f"blk.{i}."
        if a.arch == "gptneox":
            out += [_info(b + "attn_norm.weight", (e,), "F32"), _info(b + "attn_norm.bias", (e,), "F32"),
                    w(b + "attn_qkv.weight", (e, 3 * e), i), _info(b + "attn_qkv.bias", (3 * e,), "F32"),
                    w(b + "attn_output.weight", (e, e), i), _info(b + "attn_output.bias", (e,), "F32"),
                    _info(b + "ffn_norm.weight", (e,), "F32"), _info(b + "ffn_norm.bias", (e,), "F32"),
                    w(b + "ffn_up.weight", (e, f), i), _info(b + "ffn_up.bias", (f,), "F32"),
                    w(b + "ffn_down.weight", (f, e), i), _info(b + "ffn_down.bias", (e,), "F32")]
        else:
            out += [_info(b + "attn_norm.weight", (e,), "F32"), w(b + "attn_q.weight", (e, e), i),
                    w(b + "attn_k.weight", (e, a.n_head_kv * head), i), w(b + "attn_v.weight", (e, a.n_head_kv * head), i),
                    w(b + "attn_output.weight", (e, e), i), _info(b + "ffn_norm.weight", (e,), "F32"),
                    w(b + "ffn_gate.weight", (e, f), i), w(b + "ffn_up.weight", (e, f), i), w(b + "ffn_down.weight", (f, e), i)]
    out += [_info("output_norm.weight", (e,), "F32")]
    if a.arch == "gptneox":
        out += [_info("output_norm.bias", (e,), "F32")]
    out += [w("output.weight", (e, v))]
    return out


def model_hparams(a: Arch, ts: list[TensorInfo]) -> HParams:
    """The hyperparameters as :func:`estimator.gguf.hparams.hparams` reads them from a header with these keys."""
    meta = {"general.architecture": a.arch, f"{a.arch}.block_count": a.n_layer, f"{a.arch}.embedding_length": a.n_embd,
            f"{a.arch}.attention.head_count": a.n_head, f"{a.arch}.attention.head_count_kv": a.n_head_kv,
            f"{a.arch}.feed_forward_length": a.n_ff, f"{a.arch}.context_length": a.n_ctx_train, f"{a.arch}.vocab_size": a.n_vocab}
    return hparams(GGUFHeader("synthetic.gguf", 0, 0, 32, meta, tuple(ts)))


# ------------------------------------------------------------------ the cases

@dataclass(frozen=True)
class Figure:
    case: str
    model: str
    hardware: str
    phase: str  # "pp" or "tg"
    n: int
    measured: float
    estimate: float | None
    size_printed_gib: float | None
    size_ours_gib: float
    note: str = ""

    @property
    def ratio(self) -> float | None:
        return None if self.estimate is None else self.estimate / self.measured


_FTYPE = {"F16": "F16", "Q8_0": "Q8_0", "Q4_0": "Q4_0", "Q4_1": "Q4_1", "Q4_K - Medium": "Q4_K_M", "Q4_K - Small": "Q4_K_S",
          "Q5_K - Medium": "Q5_K_M", "Q5_K - Small": "Q5_K_S", "Q6_K": "Q6_K", "Q2_K - Medium": "Q2_K", "all F32 (guessed)": "F16"}


def _ftype(text: str) -> str:
    text = text.replace("mostly ", "").strip()
    for key in sorted(_FTYPE, key=len, reverse=True):
        if text.startswith(key) or f" {key}" in text:
            return _FTYPE[key]
    raise ValueError(f"unknown file type {text!r}")


def _build(text: object) -> int:
    match = re.search(r"\((\d{3,5})\)|build (\d{3,5})", str(text))
    return int(match.group(1) or match.group(2)) if match else 0


def _run(hw: Hardware, build: int, **kw: object) -> LlamaCppRun:
    """The settings a build ran with: flash attention off (the default until 2025), CUDA graphs from b2822 (PR #6766),
    quantized matmuls dequantized to F16 for cuBLAS on GPUs before llama.cpp's int8 tensor-core MMQ (June 2024) and on Volta,
    a fused QKV split by copies before :data:`QKV_VIEWS_BUILD`, a gated FFN's activation and product unfused before
    :data:`GLU_OPS_BUILD`, one token's attention through batched cuBLAS before :data:`MMV_BUILD` on GPUs with fast FP16."""
    cc = float(hw.compute_capability or 0)
    mmq = build >= 3150 and cc >= 7.5
    fast_fp16 = cc >= 7.0 or cc == 6.0  # ggml-cuda's fp16_performance_good: Volta and newer, and P100
    return LlamaCppRun(flash_attn=False, n_ubatch=512, cuda_graphs=build >= 2822, quant_gemm=QuantGemm.MMQ if mmq else QuantGemm.DEQUANT,
                       qkv_cont=build < QKV_VIEWS_BUILD, fused_glu=build >= GLU_OPS_BUILD,
                       kq_batched_cublas=build < MMV_BUILD and hw.vendor == "nvidia" and fast_fp16, **kw)  # type: ignore[arg-type]


NKVO_HOST = None
"""The host CPU of PR #4812's ``-nkvo 1`` rows (https://github.com/ggml-org/llama.cpp/pull/4812, slaren, 2024-01-07): not
named. The PR's text names only the GPU ("NVIDIA GeForce RTX 3090 Ti") and no comment naming a CPU was found in it; the
author's only stated machine found is from August 2023 ("13900k, DDR5 6400", https://github.com/ggml-org/llama.cpp/issues/34),
five months earlier, not of the PR's weeks. The bench guesses no host where a case names none (a partially offloaded
case is "not modelled: partial offload: host not named", :func:`_generic`), so these two figures stay unmodelled and
count as misses. The -nkvo path itself (:mod:`estimator.speed.llamacpp`, ``offload_kqv=False``) is modelled for users,
who name their host. Build 1786 also predates the ggml-backend scheduler (PR #4766) whose placement the model follows."""


GLU_OPS_BUILD = 5700
"""The first build assumed to fuse a gated FFN's activation and product (``ggml_swiglu_split``, the GLU ops of PR #14158,
merged June 2025, about b5700); every case here is older (two kernels: the activation, then ``ggml_mul``)."""


MMV_BUILD = 4114
"""The first build that multiplies one token's F16 KQ / KQV with ``ggml_cuda_mul_mat_vec`` (one kernel each) instead of
``ggml_cuda_mul_mat_batched_cublas`` (three or four: :attr:`estimator.speed.llamacpp.LlamaCppRun.kq_batched_cublas`): PR
#10318 (https://github.com/ggml-org/llama.cpp/pull/10318), merged as c3ea58ac on 2024-11-17, which llama.cpp's CI logs
print as "build: 4114 (c3ea58ac)" (ggml-org/ci, the ctest logs of that commit). The cases here are older
(b1786-b2824, batched cuBLAS on their Volta / Ampere / Ada GPUs) or newer (b4424, where the V100's KQ at fewer than
``MMV_MAX_ROWS`` = 512 cache cells and its KQV take ``ggml_cuda_mul_mat_vec``)."""


QKV_VIEWS_BUILD = 4880
"""The first build assumed to split a fused QKV by views without copies: the graph rewrite (``llm_graph_context``, PR #12181,
March 2025, about b4880). Before it the copies are in the source (b4400-era ``build_gptneox``); after it we have only
today's ``llm_build_gptneox`` (views), so the exact build the copies went is not known: every case here is older."""


POWER_CAPS: dict[str, float] = {
    "LLaMA 3/walkthrough_with_SSH.ipynb": 230,
    "LLaMA 3/Gaming GPUs/3090_v3.ipynb": 370,
    "LLaMA 3/Gaming GPUs/3080Ti_v3.ipynb": 350,
    "LLaMA 3/Gaming GPUs/3080_v3.ipynb": 380,
    "LLaMA 3/Gaming GPUs/3070_v3.ipynb": 220,
    "LLaMA 3/Gaming GPUs/4070Ti_v3.ipynb": 285,
}
"""The board power limit each XiongjieDai notebook's first cell printed (``nvidia-smi``'s ``Pwr:Usage/Cap``, watts; the
notebooks at commit aa72e0ec of github.com/XiongjieDai/GPU-Benchmarks-on-LLM-Inference, which the runs' ``source.path``
names): the run's stated setting, passed to :func:`estimator.speed.hardware.power_capped`. Only the second RTX 3090
notebook's (walkthrough_with_SSH: "29W / 230W", driver 550.54.14, on an AMD EPYC 7702P host) is below its card's
board power (350 W); the others are at or above theirs (3070 220 of 220 W, 3080 380 of 320, 3080 Ti 350 of 350, the
first 3090 370 of 350, 4070 Ti 285 of 285) and run at the rated clock. Everything else the two 3090 notebooks print is
the same kind: llama-bench defaults (ngl 99, no -fa, -b/-ub unset), ``GGML_CUDA_FORCE_MMQ: no``, ``CUDA_USE_TENSOR_CORES:
yes``, ``make LLAMA_CUBLAS=1`` with nvcc 12.1 (CUDA graphs compiled in); builds 2824 and 2843 (May 2024, nine days
apart). A run that states ``settings.power_limit_w`` (held-out files) takes that instead."""


def _estimate(a: Arch, ftype: str, hw: Hardware, build: int, phase: str, n: int, **kw: object) -> tuple[float, float]:
    ts = tensors(a, ftype)
    hp = model_hparams(a, ts)
    size = sum(t.n_bytes for t in ts) / 2**30
    restart = int(kw.pop("restart_every", 0))  # type: ignore[call-overload]
    depth = int(kw.pop("depth", 0))  # type: ignore[call-overload]
    run = _run(hw, build, **kw)
    if phase == "tg":
        return generation(ts, hp, hw, n_gen=n, depth=depth, run=run).tokens_per_second, size
    return prompt(ts, hp, hw, n_prompt=n, run=run, restart_every=restart).tokens_per_second, size


_ROW = re.compile(r"\|\s*(?P<model>[^|]+?)\s*\|\s*(?P<size>[\d.]+) GiB\s*\|(?:[^|]*\|){0,3}?\s*(?:CUDA|Metal)?[^|]*\|?\s*"
                  r"(?:\d+\s*\|)?\s*(?P<test>(?:pp|tg)\s*\d+)\s*\|\s*(?P<ts>[\d.]+)")


def figures(limit: int | None = None) -> list[Figure]:
    out: list[Figure] = []
    for line in [line for line in RUNS.read_text().splitlines() if line.strip()][:limit]:
        r = json.loads(line)
        out += _case(r)
    return out


def _power_cap(r: dict) -> float | None:
    """The board power limit the run states (:data:`POWER_CAPS`), or None."""
    stated = r.get("settings", {}).get("power_limit_w") if isinstance(r.get("settings"), dict) else None
    return float(stated) if stated else POWER_CAPS.get(str(r.get("source", {}).get("path", "")))


def _fig(r: dict, model: str, a: Arch, ftype: str, hw_name: str, build: int, phase: str, n: int, measured: float,
         printed: float | None, note: str = "", **kw: object) -> Figure:
    hw = find_hardware(hw_name)
    cap = _power_cap(r)
    if cap is not None and hw.board_power_w is not None and cap < hw.board_power_w:
        hw = power_capped(hw, cap)
        note = "; ".join(x for x in (note, f"power cap {cap:g} W of {hw.board_power_w:g} W: SM clock x {hw.extra['sm_clock_share']}") if x)
    estimate, size = _estimate(a, ftype, hw, build, phase, n, **kw)
    return Figure(r["id"], f"{model} {ftype}", hw.name, phase, n, measured, estimate, printed, size, note)


def _case(r: dict) -> list[Figure]:
    rid = r["id"]
    m = r.get("model", {})
    if rid.startswith("ggmlci-v100-pythia"):
        ftype = _ftype(r["id"].split("-")[-2].upper().replace("Q4_K", "Q4_K - Medium").replace("Q2_K", "Q2_K - Medium"))
        printed = float(m["model_size_printed"].split()[0])
        # llama-cli: 7 prompt tokens, 256 generated (255 timed) from position 8
        return [_fig(r, "pythia-2.8B", PYTHIA_2_8B, ftype, "V100 PCIe 16GB", 4424, "tg", 255, float(r["measured"]["eval tokens per second"]),
                     printed, depth=8)]
    if rid.startswith("ggmlci-v100-openllama"):
        ftype = _ftype(m["model_ftype_printed"])
        printed = float(m["model_size_printed"].split()[0])
        build = _build(r["source"]["llama_cpp_build"])
        meas = r["measured"]
        return [
            _fig(r, "open_llama_7b_v2", OPEN_LLAMA_7B, ftype, "V100 PCIe 16GB", build, "tg", 255, float(meas["tg tokens per second"]), printed,
                 depth=8),
            _fig(r, "open_llama_7b_v2", OPEN_LLAMA_7B, ftype, "V100 PCIe 16GB", build, "pp", 8192, float(meas["pp tokens per second"]), printed,
                 "llama-perplexity -c 2048 -b 512: 4 chunks, logits for every token", restart_every=2048, all_logits=True),
        ]
    if rid.startswith("xiongjiedai"):
        gpu = re.search(r"GeForce (RTX \d{4}(?: Ti)?)", r["hardware"][0])
        assert gpu is not None
        build = _build(r["software"]["llama.cpp"][0])
        rows = []
        for row in r["measured_table_rows"][1:]:
            cells = [c.strip() for c in row.strip("|").split("|")]
            test = cells[5].replace(" ", "")
            if "+" in test:
                continue  # pp512+tg128: a mix, not one phase
            phase, n = test[:2], int(test[2:])
            ftype = _ftype(cells[0].removeprefix("llama 8B").strip())
            rows.append(_fig(r, "Meta-Llama-3-8B", LLAMA3_8B, ftype, gpu.group(1), build, phase, n, float(cells[6].split()[0]),
                             float(cells[1].split()[0])))
        return rows
    if rid.startswith("gh-llamacpp-pr4766"):
        rows = []
        for row in r["measured_table_rows"]:
            cells = [c.strip() for c in row.strip("|").split("|")]
            test = cells[5].replace(" ", "")
            rows.append(_fig(r, "CodeLlama-7b", CODELLAMA_7B, _ftype(cells[0].removeprefix("llama 7B").strip()), "RTX 4090", 1800,
                             test[:2], int(test[2:]), float(cells[6].split()[0]), float(cells[1].split()[0])))
        return rows
    if rid.startswith("gh-llamacpp-pr4812"):
        rows = []
        for row in r["measured_table_rows"]:
            cells = [c.strip() for c in row.split("|")]
            nkvo = cells[0].endswith("1")
            test = cells[1].replace(" ", "")
            fig = _fig(r, "LLaMA-7B", LLAMA_7B, "Q4_0", "RTX 3090 Ti", 1786, test[:2], int(test[2:]), float(cells[2].split()[0]), 3.56)
            if nkvo:  # NKVO_HOST: no source names the host CPU, and the bench guesses no host (as for partial offload)
                fig = Figure(fig.case, fig.model, fig.hardware, fig.phase, fig.n, fig.measured, None, fig.size_printed_gib, fig.size_ours_gib,
                             "-nkvo 1: KV cache and attention on the host CPU, which no source of the PR's weeks names; not modelled "
                             "(LlamaCppRun(offload_kqv=False) models it given a host)")
            rows.append(fig)
        return rows
    if rid.startswith("gh-llamacpp-pr3084"):
        rows = []
        for row in r["measured_table_rows"]:
            cells = [c.strip() for c in row.split("|")]
            ftype = _ftype(cells[0].removeprefix("LLaMA 7B").strip())
            master = float(cells[4].split()[1])
            rows.append(_fig(r, "LLaMA-7B", LLAMA_7B, ftype, "M2 Ultra 192GB", 1200, "pp", 512, master, float(cells[1].split()[0]),
                             "Metal, master of Sept 2023 (the PR's own column is 10-14 % faster)"))
        return rows
    return _generic(r)


# llama-bench's "llama 8B" and its parameter count -> the model's sizes (the configs of the models those names cover)
KNOWN: dict[tuple[str, float], Arch] = {
    ("llama", 6.74): LLAMA_7B, ("llama", 8.03): LLAMA3_8B,
    ("llama", 13.02): Arch("llama", 40, 5120, 40, 40, 13824, 32000, 4096),  # Llama-2-13b config.json
    ("llama", 70.55): Arch("llama", 80, 8192, 64, 8, 28672, 128256, 8192),  # Meta-Llama-3-70B config.json
    ("llama", 68.98): Arch("llama", 80, 8192, 64, 8, 28672, 32000, 4096),  # Llama-2-70b config.json
    ("llama", 7.24): Arch("llama", 32, 4096, 32, 8, 14336, 32000, 32768),  # Mistral-7B-v0.1 config.json
    ("llama", 1.10): Arch("llama", 22, 2048, 32, 4, 5632, 32000, 2048),  # TinyLlama-1.1B config.json
}


def _hardware_in(text: str) -> Hardware | None:
    """The known hardware whose name or alias appears in ``text`` (the longest match)."""
    from estimator.speed.hardware import HARDWARE

    flat = re.sub(r"[^a-z0-9]", "", text.lower())
    best: tuple[int, Hardware] | None = None
    for hw in HARDWARE:
        for name in (hw.name, *hw.aliases, *((hw.chip, f"Apple {hw.chip}") if hw.chip else ())):  # a Mac by its chip: any memory
            key = re.sub(r"[^a-z0-9]", "", name.lower())
            if len(key) >= 4 and key in flat and (best is None or len(key) > best[0]):
                best = (len(key), hw)
    return None if best is None else best[1]


def _generic(r: dict) -> list[Figure]:
    """Any other case with llama-bench table rows (``| model | size | params | backend | ngl | test | t/s |``): the model from
    the printed architecture and parameter count (``KNOWN``) or the case's own hyperparameters, the hardware named in it."""
    rows = r.get("measured_table_rows") or []
    hw = _hardware_in(json.dumps(r.get("hardware", "")))
    build = _build(json.dumps(r.get("software", "")))
    m = r.get("model", {})
    out = []
    for row in rows:
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        test = next((c.replace(" ", "") for c in cells if re.fullmatch(r"(pp|tg)\s*\d+", c)), None)
        if test is None or len(cells) < 4:
            continue
        words = cells[0].split()
        measured = float(cells[-1].split()[0])
        params = next((float(c.split()[0]) for c in cells if c.endswith(" B") and c.split()[0].replace(".", "").isdigit()), 0.0)
        size = next((float(c.split()[0]) for c in cells if c.endswith("GiB")), None)
        arch = KNOWN.get((words[0], round(params, 2))) if words else None
        if arch is None and all(k in m for k in ("arch", "n_layer", "n_embd", "n_head", "n_vocab")) and m.get("n_ff"):
            arch = Arch(m["arch"], m["n_layer"], m["n_embd"], m["n_head"], m.get("n_head_kv", m["n_head"]), m["n_ff"], m["n_vocab"],
                        m.get("n_ctx_train", 4096))
        try:
            ftype = _ftype(" ".join(words[2:]))
        except ValueError:
            ftype = ""
        ngl = next((int(c) for c in cells[3:6] if c.isdigit()), 99)
        if hw is None or arch is None or not ftype or ngl < 99 and ngl <= (arch.n_layer if arch else 0):
            out.append(Figure(r["id"], cells[0], hw.name if hw else str(r.get("hardware")), test[:2], int(test[2:]), measured, None, size,
                              0.0, "not modelled: " + ("hardware not in the table" if hw is None else "model sizes unknown" if arch is None
                                                       else "file type unknown" if not ftype else "partial offload: host not named")))
            continue
        estimate, ours = _estimate(arch, ftype, hw, build, test[:2], int(test[2:]))
        out.append(Figure(r["id"], f"{cells[0]}", hw.name, test[:2], int(test[2:]), measured, estimate, size, ours))
    return out


# ------------------------------------------------------------------ report

def _pct(x: float) -> str:
    return f"{x * 100:+.1f}%"


def summary(figs: list[Figure]) -> tuple[list[str], dict[str, dict[str, float]]]:
    lines, stats = [], {}
    for phase in ("tg", "pp"):
        errs = [f.ratio - 1 for f in figs if f.phase == phase and f.ratio is not None]
        missing = sum(1 for f in figs if f.phase == phase and f.ratio is None)
        if not errs:
            continue
        within = sum(abs(e) <= TARGET[phase] for e in errs)
        ratios = sorted(1 + e for e in errs)
        stats[phase] = {"n": len(errs), "median_abs": statistics.median(abs(e) for e in errs), "within": within,
                        "min": ratios[0], "max": ratios[-1], "median_ratio": statistics.median(ratios),
                        "p10": ratios[len(ratios) // 10], "p90": ratios[min(len(ratios) - 1, len(ratios) * 9 // 10)]}
        s = stats[phase]
        lines.append(f"{phase}: {len(errs)} figures, median |error| {s['median_abs'] * 100:.1f}%, estimate/measured median "
                     f"{s['median_ratio']:.2f} (10-90%: {s['p10']:.2f}-{s['p90']:.2f}, range {s['min']:.2f}-{s['max']:.2f}); within "
                     f"+-{TARGET[phase] * 100:.0f}%: {within}/{len(errs) + missing} ({within / (len(errs) + missing) * 100:.1f}%)"
                     + (f", {missing} not modelled (counted as misses)" if missing else ""))
    return lines, stats


def table(figs: list[Figure]) -> str:
    head = "| case | model | hardware | test | measured t/s | estimate t/s | est/meas | size printed / ours (GiB) | note |\n|---|---|---|---|---:|---:|---:|---|---|\n"
    body = ""
    for f in figs:
        est = "n/a" if f.estimate is None else f"{f.estimate:,.1f}"
        ratio = "n/a" if f.ratio is None else f"{f.ratio:.2f}"
        size = f"{f.size_printed_gib:.2f} / {f.size_ours_gib:.2f}" if f.size_printed_gib else f"- / {f.size_ours_gib:.2f}"
        body += f"| {f.case} | {f.model} | {f.hardware} | {f.phase} {f.n} | {f.measured:,.2f} | {est} | {ratio} | {size} | {f.note} |\n"
    return head + body


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m bench.speed_accuracy", description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="the first three cases only; write nothing")
    args = parser.parse_args(argv)
    figs = figures(limit=3 if args.smoke else None)
    lines, _ = summary(figs)
    for f in figs:
        r = "n/a" if f.ratio is None else f"{f.ratio:5.2f}"
        print(f"{f.case[:48]:48s} {f.model[:24]:24s} {f.hardware[:16]:16s} {f.phase} {f.n:<5d} measured {f.measured:9.2f} "
              f"estimate {f.estimate or 0:9.2f}  est/meas {r}")
    print()
    for line in lines:
        print(line)
    print(f"peers: {PEERS}")
    if args.smoke:
        return 0
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        "# llama.cpp speed: estimate vs measured\n\n`python -m bench.speed_accuracy` on `bench/data/speed_runs.jsonl` (a copy of the project's shared speed runs) "
        "(public llama.cpp CI logs and llama-bench tables). Targets: tg within +-20 %, pp within +-35 %, on 80 % of figures each.\n\n"
        + "\n".join(f"- {line}" for line in lines) + f"\n- peers: {PEERS}\n\n" + table(figs)
    )
    print(f"wrote {RESULTS.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))



