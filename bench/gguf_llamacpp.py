"""Our GGUF figures against llama.cpp itself: weights, KV cache, compute and output buffers.

For every tiny GGUF model of the Hub stand-in (``testkit/gguf_models.py``: a Llama, a Gemma-3 with
sliding-window layers, a Qwen3-MoE; several quantizations) and each context length, KV cache type
and flash-attention setting below, llama.cpp loads the whole file on the CPU and reports, from its
own accounting (``llama_get_memory_breakdown``, exact bytes), its model, KV ("context") and compute
buffers; ``bench/llamacpp_probe.cpp`` prints them. We compute the same from the file's header alone
(``estimator.gguf``). Results: ``bench/results/gguf_llamacpp.md``.

llama.cpp is not a dependency: point ``LLAMA_CPP_LIB`` at a folder holding ``libllama.so`` (and the
ggml libraries) and ``LLAMA_CPP_SRC`` at its source tree (for ``include/``, ``ggml/include`` and
``src/llama-ext.h``); the probe is compiled once into ``bench/.cache/``. How it was built here:
``docs/gguf.md``. ``python -m bench.gguf_llamacpp`` (with ``PYTHONPATH`` at the repo root).

``--smoke``: the first served model at one context and cache type, nothing written; without llama.cpp it computes
our side only and says llama.cpp's was not measured.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROBE_SRC = ROOT / "bench" / "llamacpp_probe.cpp"
PROBE = ROOT / "bench" / ".cache" / "llamacpp_probe"
RESULTS = ROOT / "bench" / "results" / "gguf_llamacpp.md"
REPOS = ("estimator-test/gguf-only", "estimator-test/gguf-gemma3", "estimator-test/gguf-qwen3moe", "estimator-test/gguf-deepseek2")
# Models written the same way but not served (Q8_0 only), for shapes the served ones lack: a 32k vocabulary (the logits
# dominate, as in real models), a feed-forward 4x the embedding (Llama-2/3, Mistral); and shapes that were not looked at
# while the compute formula was written (held out): a query wider than the embedding, no GQA with an 8k vocabulary,
# a Gemma-3 with a wide feed-forward, a Qwen3-MoE with 16 experts (4 used), a wider DeepSeek-2 (MLA)
VARIANTS = {
    "bench/llama-vocab32k": dict(n_embd=256, n_ff=768, n_vocab=32000, n_head=4, n_head_kv=2, head=64),
    "bench/llama-ff4x": dict(n_embd=512, n_ff=2048, n_vocab=512, n_head=8, n_head_kv=2, head=64),
    "bench/llama-wideq": dict(n_embd=256, n_ff=1024, n_vocab=512, n_head=4, n_head_kv=2, head=128),
    "bench/llama-mha-vocab8k": dict(n_embd=512, n_ff=1024, n_vocab=8192, n_head=8, n_head_kv=8, head=64),
    "bench/gemma3-ff4x": dict(arch="gemma3", n_embd=256, n_ff=1024, n_vocab=512, n_head=4, n_head_kv=2, head=128),
    "bench/qwen3moe-16x": dict(arch="qwen3moe", n_embd=256, n_ff_exp=128, n_expert=16, n_expert_used=4, n_vocab=512,
                               n_head=8, n_head_kv=2, head=64),
    "bench/deepseek2-wide": dict(arch="deepseek2", n_embd=512, n_head=8, q_lora=256, kv_lora=256, rope=64, nope=64,
                                 v_head=64, n_ff=1024, n_ff_exp=256, n_expert=8, n_vocab=512),
    # a second held-out set, written after the compute formula had been fitted to all of the above
    "bench/llama-e384-ff4x-vocab1k": dict(n_embd=384, n_ff=1536, n_vocab=1000, n_head=6, n_head_kv=2, head=64),
    "bench/llama-head128-ff3x": dict(n_embd=512, n_ff=1536, n_vocab=512, n_head=8, n_head_kv=4, head=128),
    "bench/gemma3-narrowq": dict(arch="gemma3", n_embd=512, n_ff=1536, n_vocab=512, n_head=2, n_head_kv=1, head=128),
    "bench/qwen3moe-32x": dict(arch="qwen3moe", n_embd=512, n_ff_exp=64, n_expert=32, n_expert_used=8, n_vocab=512,
                               n_head=4, n_head_kv=2, head=128),
    "bench/deepseek2-16h": dict(arch="deepseek2", n_embd=1024, n_head=16, q_lora=384, kv_lora=512, rope=64, nope=128,
                                v_head=128, n_ff=2048, n_ff_exp=256, n_expert=8, n_vocab=512),
    # a third held-out set, written after the formula had been adjusted to the second
    "bench/llama-e768-vocab4k": dict(n_embd=768, n_ff=2048, n_vocab=4096, n_head=12, n_head_kv=4, head=64),
    "bench/llama-head128-ff8x": dict(n_embd=256, n_ff=2048, n_vocab=512, n_head=2, n_head_kv=1, head=128),
    "bench/gemma3-e384": dict(arch="gemma3", n_embd=384, n_ff=1024, n_vocab=512, n_head=3, n_head_kv=1, head=128),
    "bench/qwen3moe-64x": dict(arch="qwen3moe", n_embd=384, n_ff_exp=128, n_expert=64, n_expert_used=6, n_vocab=512,
                               n_head=6, n_head_kv=2, head=64),
    "bench/deepseek2-lite": dict(arch="deepseek2", n_embd=512, n_head=4, q_lora=128, kv_lora=128, rope=64, nope=64,
                                 v_head=64, n_ff=1536, n_ff_exp=192, n_expert=16, n_vocab=512),
    # a fourth held-out set: real models' widths and vocabularies (Llama-3-8B, Gemma-3-4B, Qwen3-30B-A3B, a DeepSeek-V2-like
    # MLA model) in 2, 7, 3 and 3 layers; the files are sparse (zeros), so they take no disk space. Written after set 3
    "bench/llama3-8b-shape": dict(n_embd=4096, n_ff=14336, n_vocab=128256, n_head=32, n_head_kv=8, head=128),
    "bench/gemma3-4b-shape": dict(arch="gemma3", n_embd=2560, n_ff=10240, n_vocab=262144, n_head=8, n_head_kv=4, head=256),
    "bench/qwen3-30b-a3b-shape": dict(arch="qwen3moe", n_embd=2048, n_ff_exp=768, n_expert=128, n_expert_used=8, n_vocab=151936,
                                      n_head=32, n_head_kv=4, head=128),
    "bench/deepseek2-v2-shape": dict(arch="deepseek2", n_embd=2048, n_head=16, q_lora=512, kv_lora=512, rope=64, nope=128,
                                     v_head=128, n_ff=10944, n_ff_exp=1408, n_expert=64, n_vocab=102400),
}
# the sets the summary counts apart: what the compute formula was written against, then three held-out sets
SETS = (
    ("served models, 32k vocabulary, ff 4x (formula written against these)", REPOS + ("bench/llama-vocab32k", "bench/llama-ff4x")),
    ("held out 1 (then used to adjust the formula)", ("bench/llama-wideq", "bench/llama-mha-vocab8k", "bench/gemma3-ff4x", "bench/qwen3moe-16x",
                                                     "bench/deepseek2-wide")),
    ("held out 2 (then used to adjust the formula)", ("bench/llama-e384-ff4x-vocab1k", "bench/llama-head128-ff3x", "bench/gemma3-narrowq",
                                                     "bench/qwen3moe-32x", "bench/deepseek2-16h")),
    ("held out 3 (then used twice: a bug fixed, an MoE model's dense layers uncounted; a Gemma rule fitted to set 2 dropped)", ("bench/llama-e768-vocab4k",
                                                     "bench/llama-head128-ff8x", "bench/gemma3-e384", "bench/qwen3moe-64x", "bench/deepseek2-lite")),
    ("held out 4: real models' widths and vocabularies (Llama-3-8B, Gemma-3-4B, Qwen3-30B-A3B, DeepSeek-V2-like; then used once: "
     "the shared expert's last layer)", (
        "bench/llama3-8b-shape", "bench/gemma3-4b-shape", "bench/qwen3-30b-a3b-shape", "bench/deepseek2-v2-shape")),
)
CONTEXTS = (512, 4096)
# (type_k = type_v, flash attention): f16 with and without flash attention, q8_0 (a quantized V needs it on)
CACHES = (("f16", True), ("f16", False), ("q8_0", True))
COMPUTE_TOLERANCE = 0.05


def probe_path() -> Path | None:
    """The compiled probe, building it when llama.cpp's library and sources are given; None without llama.cpp."""
    lib, src = os.environ.get("LLAMA_CPP_LIB"), os.environ.get("LLAMA_CPP_SRC")
    if not lib or not src or not (Path(lib) / "libllama.so").exists():
        return None
    if not PROBE.exists() or PROBE.stat().st_mtime < PROBE_SRC.stat().st_mtime:
        PROBE.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["g++", "-std=c++17", "-O1", f"-I{src}/include", f"-I{src}/ggml/include", f"-I{src}/src", str(PROBE_SRC),
             f"-L{lib}", "-lllama", "-lggml", "-lggml-base", f"-Wl,-rpath,{lib}", "-o", str(PROBE)],
            check=True,
        )
    return PROBE


def llama_cpp(probe: Path, model: Path, n_ctx: int, cache: str, flash: bool) -> dict[str, int]:
    """What llama.cpp allocated: model (all buffer types), KV, compute, and the CPU_Mapped model buffer."""
    done = subprocess.run([str(probe), str(model), str(n_ctx), cache, cache, "1" if flash else "0", "2048", "512", "0"],
                          capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"llama.cpp failed on {model.name}: {done.stderr[-2000:]}")
    data = json.loads(done.stdout)
    buffers = data["buffers"]
    return {
        "model_size": data["model_size"],
        "mapped": buffers.get("CPU_Mapped", {}).get("model", 0),
        "repack": buffers.get("CPU_REPACK", {}).get("model", 0),
        "kv": sum(b["context"] for b in buffers.values()),
        "compute": sum(b["compute"] for b in buffers.values()),
        "n_ctx": data["n_ctx"],
    }


@dataclass
class Case:
    repo: str
    files: list[str]
    n_ctx: int
    cache: str
    flash: bool
    ours: dict[str, int]
    theirs: dict[str, int]

    @property
    def compute_error(self) -> float:
        return self.ours["compute"] / self.theirs["compute"] - 1


def ours(paths: list[Path], n_ctx: int, cache: str, flash: bool) -> dict[str, int]:
    from estimator.gguf import compute, kv_cache
    from estimator.gguf.header import parse_header
    from estimator.gguf.hparams import hparams
    from estimator.gguf.weights import weights

    headers = []
    for path in paths:
        header = parse_header(path.read_bytes(), path.stat().st_size, path.name)
        assert header is not None
        headers.append(header)
    hp = hparams(headers[0])
    kv = kv_cache.kv_cache(hp, n_ctx, type_k=cache, type_v=cache, flash_attn=flash)
    bufs = compute.buffers(hp, kv, flash_attn=flash, type_k=cache, type_v=cache)
    return {"weights": weights(headers).total, "kv": kv.total, "compute": bufs.compute, "output": bufs.output, "n_ctx": kv.cells}


def register_variants() -> None:
    from testkit import gguf_models as g

    for repo, d in VARIANTS.items():
        arch, name = d.get("arch", "llama"), repo.split("/")[1]
        e, v = d["n_embd"], d["n_vocab"]
        if arch == "llama":
            meta = {"context_length": 8192, "embedding_length": e, "block_count": 2, "feed_forward_length": d["n_ff"],
                    "attention.head_count": d["n_head"], "attention.head_count_kv": d["n_head_kv"], "rope.dimension_count": d["head"],
                    "attention.key_length": d["head"], "attention.value_length": d["head"], "attention.layer_norm_rms_epsilon": 1e-5}
            tensors = g._llama_tensors(e, 2, d["n_head"], d["n_head_kv"], d["n_ff"], v, d["head"])
        elif arch == "gemma3":
            meta = dict(g.MODELS["estimator-test/gguf-gemma3"].meta, embedding_length=e, feed_forward_length=d["n_ff"], **{
                "attention.head_count": d["n_head"], "attention.head_count_kv": d["n_head_kv"], "attention.key_length": d["head"],
                "attention.value_length": d["head"]})
            tensors = g._gemma3_tensors(e, 7, d["n_head"], d["n_head_kv"], d["n_ff"], v, d["head"])
        elif arch == "qwen3moe":
            meta = dict(g.MODELS["estimator-test/gguf-qwen3moe"].meta, embedding_length=e, expert_feed_forward_length=d["n_ff_exp"],
                        expert_count=d["n_expert"], expert_used_count=d["n_expert_used"], **{
                            "attention.head_count": d["n_head"], "attention.head_count_kv": d["n_head_kv"], "attention.key_length": d["head"],
                            "attention.value_length": d["head"]})
            tensors = g._qwen3moe_tensors(e, 3, d["n_head"], d["n_head_kv"], d["n_ff_exp"], d["n_expert"], v, d["head"])
        else:
            meta = dict(g.MODELS["estimator-test/gguf-deepseek2"].meta, embedding_length=e, feed_forward_length=d["n_ff"],
                        expert_feed_forward_length=d["n_ff_exp"], expert_count=d["n_expert"], **{
                            "attention.head_count": d["n_head"], "attention.key_length": d["kv_lora"] + d["rope"],
                            "attention.value_length": d["kv_lora"], "attention.key_length_mla": d["nope"] + d["rope"],
                            "attention.value_length_mla": d["v_head"], "attention.q_lora_rank": d["q_lora"],
                            "attention.kv_lora_rank": d["kv_lora"], "rope.dimension_count": d["rope"]})
            tensors = g._deepseek2_tensors(e, 3, d["n_head"], d["q_lora"], d["kv_lora"], d["rope"], d["nope"], d["v_head"], d["n_ff"],
                                           d["n_ff_exp"], d["n_expert"], 1, 1, v)
        g.MODELS[repo] = g.Spec(arch=arch, meta=meta, tensors=tensors, n_vocab=v, files={name: ("Q8_0", 1)})


def run(probe: Path, *, variants: bool = True) -> list[Case]:
    from testkit import gguf_models

    if variants:
        register_variants()
    cases = []
    with tempfile.TemporaryDirectory() as folder:
        for repo in REPOS + (tuple(VARIANTS) if variants else ()):
            groups: dict[str, list[str]] = {}
            for name in gguf_models.headers(repo):
                groups.setdefault(name.split("-0000")[0], []).append(name)
            for names in groups.values():
                paths = [gguf_models.write_full(repo, name, Path(folder)) for name in sorted(names)]
                for n_ctx in CONTEXTS:
                    for cache, flash in CACHES:
                        cases.append(Case(repo, sorted(names), n_ctx, cache, flash, ours(paths, n_ctx, cache, flash),
                                          llama_cpp(probe, paths[0], n_ctx, cache, flash)))
    return cases


def llama_cpp_version() -> str:
    src = os.environ.get("LLAMA_CPP_SRC", "")
    done = subprocess.run(["git", "-C", src, "log", "-1", "--format=%h (%cs)"], capture_output=True, text=True)
    return f"commit {done.stdout.strip()}" if done.returncode == 0 and done.stdout.strip() else "(version unknown)"


def report(cases: list[Case]) -> str:
    lines = [
        "# GGUF: our figures against llama.cpp",
        "",
        f"llama.cpp {llama_cpp_version()}, CPU, one sequence, n_batch 2048, n_ubatch 512, swa_full off (llama-server's",
        "defaults); each tiny model of the Hub stand-in loaded whole (`bench/gguf_llamacpp.py`). llama.cpp's figures are",
        "its own exact byte counts (`llama_get_memory_breakdown`): weights = `llama_model_size`, KV = the context buffers,",
        "compute = the compute buffers. Ours come from the GGUF header alone (`estimator/gguf/compute.py` for the compute buffer).",
        "",
        "```",
        "LLAMA_CPP_LIB=<build>/bin LLAMA_CPP_SRC=<llama.cpp source> PYTHONPATH=$PWD .venv/bin/python -m bench.gguf_llamacpp",
        "```",
        "",
        "| file | n_ctx | cache | FA | weights ours / llama.cpp | KV ours / llama.cpp | compute ours / llama.cpp | compute error |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in cases:
        lines.append(
            f"| {c.files[0]}{' (+1 part)' if len(c.files) > 1 else ''} | {c.n_ctx} | {c.cache} | {'on' if c.flash else 'off'} | "
            f"{c.ours['weights']:,} / {c.theirs['model_size']:,} | {c.ours['kv']:,} / {c.theirs['kv']:,} | "
            f"{c.ours['compute']:,} / {c.theirs['compute']:,} | {c.compute_error:+.1%} |"
        )
    exact = sum(c.ours["weights"] == c.theirs["model_size"] == c.theirs["mapped"] and c.ours["kv"] == c.theirs["kv"] for c in cases)
    lines += ["", f"Weights (= llama.cpp's model size and its CPU_Mapped model buffer) and KV cache exact in {exact} of {len(cases)} cases.", ""]
    lines += ["| set | cases | compute within 5% | compute exact | worst compute error |", "|---|---|---|---|---|"]
    for label, members in SETS:
        group = [c for c in cases if c.repo in members]
        if not group:
            continue
        worst = max(group, key=lambda c: abs(c.compute_error))
        lines.append(
            f"| {label} | {len(group)} | {sum(abs(c.compute_error) <= COMPUTE_TOLERANCE for c in group)} | "
            f"{sum(c.ours['compute'] == c.theirs['compute'] for c in group)} | {worst.compute_error:+.1%} ({worst.files[0]}, n_ctx "
            f"{worst.n_ctx}, {worst.cache}, FA {'on' if worst.flash else 'off'}) |"
        )
    lines += [
        "",
        "On a CPU with AVX2/AVX-512, llama.cpp also repacks Q4_0/Q4_K/IQ4_NL tensors into a `CPU_REPACK` buffer next to the",
        "mapped file (" + ", ".join(sorted({f"{c.files[0]}: {c.theirs['repack']:,} bytes" for c in cases if c.theirs["repack"]})) + "); a GPU",
        "run does not, and we do not add it.",
    ]
    return "\n".join(lines) + "\n"


def smoke(probe: Path | None) -> int:
    """One file of the first served repo at n_ctx 512, f16 cache, flash attention: ours, and llama.cpp's when it is here."""
    from testkit import gguf_models

    with tempfile.TemporaryDirectory() as folder:
        names = sorted(gguf_models.headers(REPOS[0]))
        name = next((n for n in names if "-of-" not in n), names[0])  # a file that is the whole model
        path = gguf_models.write_full(REPOS[0], name, Path(folder))
        mine = ours([path], 512, "f16", True)
        print(f"ours, {name} at n_ctx 512 (f16 cache, flash attention): {mine}")
        if probe is None:
            print("llama.cpp not found (LLAMA_CPP_LIB, LLAMA_CPP_SRC): its side was not measured")
            return 0
        theirs = llama_cpp(probe, path, 512, "f16", True)
        print(f"llama.cpp: {theirs}")
        return 0 if mine["weights"] == theirs["model_size"] and mine["kv"] == theirs["kv"] else 1


def main(argv: list[str] | None = None) -> int:
    import argparse

    from bench._smoke import SMOKE_HELP

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = parser.parse_args(argv)
    probe = probe_path()
    if args.smoke:
        return smoke(probe)
    if probe is None:
        print("llama.cpp not found: set LLAMA_CPP_LIB (folder of libllama.so) and LLAMA_CPP_SRC (its source tree)", file=sys.stderr)
        return 1
    cases = run(probe)
    RESULTS.write_text(report(cases))
    print(RESULTS.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
