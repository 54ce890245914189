"""GGUF files as llama.cpp runs them (issue 14): exact weights from the headers, the KV cache, the offload split.

Truth here is independent of ``estimator.gguf``: the GGUF headers are parsed again with ``struct``
(the format: magic, version, counts, key/values, tensor infos) from the bytes the Hub stand-in
serves, tensor sizes come from gguf-py's block table, and the KV cache is counted per layer from the
metadata the way llama.cpp's ``llama_kv_cache`` constructor allocates it. Where llama.cpp itself is
at hand (``LLAMA_CPP_LIB`` / ``LLAMA_CPP_SRC``, see ``bench/gguf_llamacpp.py``), the last test
compares with what it allocates.
"""

from __future__ import annotations

import json
import math
import struct
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from estimator.fit.gpus import find_gpu
from estimator.fit.runtime import CUDA_CONTEXT_BYTES
from testkit import gguf_models
from testkit.hub_process import REPO_ROOT, hub_env

DATA = Path(__file__).parent / "hub_data"
MANIFEST: dict[str, dict[str, int]] = json.loads((DATA / "gguf" / "manifest.json").read_text())
TINY = ("estimator-test/gguf-only", "estimator-test/gguf-gemma3", "estimator-test/gguf-qwen3moe", "estimator-test/gguf-deepseek2")
BIG = "estimator-test/Meta-Llama-3.1-8B-Instruct-GGUF"


# ------------------------------------------------------------------ an independent GGUF header parser

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


class _Cursor:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, fmt: str) -> Any:
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return value

    def string(self) -> str:
        n = self.take("<Q")
        self.pos += n
        return self.data[self.pos - n : self.pos].decode()

    def value(self, vtype: int) -> Any:
        if vtype == 8:
            return self.string()
        if vtype == 9:
            item, count = self.take("<I"), self.take("<Q")
            return [self.value(item) for _ in range(count)]
        return self.take(_SCALARS[vtype])


def parse(data: bytes) -> tuple[dict[str, Any], list[tuple[str, tuple[int, ...], int]], int]:
    """(metadata, [(name, shape ne0-first, ggml type id)], data offset) of a GGUF v3 header."""
    cur = _Cursor(data)
    assert data[:4] == b"GGUF" and cur.take("<4s") and cur.take("<I") == 3
    n_tensors, n_kv = cur.take("<Q"), cur.take("<Q")
    meta = {}
    for _ in range(n_kv):
        key = cur.string()
        meta[key] = cur.value(cur.take("<I"))
    tensors = []
    for _ in range(n_tensors):
        name = cur.string()
        dims = tuple(cur.take("<Q") for _ in range(cur.take("<I")))
        tensors.append((name, dims, cur.take("<I")))
        cur.take("<Q")  # offset
    align = meta.get("general.alignment", 32)
    return meta, tensors, -(-cur.pos // align) * align


def tensor_bytes(shape: tuple[int, ...], type_id: int) -> int:
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    block, size = GGML_QUANT_SIZES[GGMLQuantizationType(type_id)]
    return math.prod(shape) // block * size


def served(url: str, repo: str, name: str, start: int = 0, stop: int | None = None) -> tuple[bytes, int]:
    """Bytes [start, stop) of a served file by an HTTP Range request, and the file's size from Content-Range."""
    request = urllib.request.Request(f"{url}/{repo}/resolve/main/{name}", headers={"Range": f"bytes={start}-{'' if stop is None else stop - 1}"})
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 206
        size = int(response.headers["Content-Range"].rsplit("/", 1)[1])
        return response.read(), size


def drive(url: str, cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    done = subprocess.run([sys.executable, "-m", "tests._drive_estimator"], input=json.dumps(cases), capture_output=True, text=True,
                          cwd=REPO_ROOT, env=hub_env(url), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return [case.get("ok") or case for case in json.loads(done.stdout)]


def cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "estimator", *args], capture_output=True, text=True, cwd=REPO_ROOT, env=hub_env(url), timeout=300)


@pytest.fixture(scope="module")
def headers(hub_server: str) -> dict[str, dict[str, tuple[dict[str, Any], list[tuple[str, tuple[int, ...], int]], int, int]]]:
    """Every served GGUF file, parsed independently: {repo: {file: (metadata, tensors, data offset, file size)}}."""
    out: dict[str, dict[str, Any]] = {}
    for repo, files in MANIFEST.items():
        out[repo] = {}
        for name in files:
            data, size = served(hub_server, repo, name, 0, 1 << 20)
            meta, tensors, offset = parse(data)
            out[repo][name] = (meta, tensors, offset, size)
    return out


# ------------------------------------------------------------------ must show: weights exact, file = header + tensors


def test_every_served_gguf_is_its_header_plus_its_tensors(headers: dict[str, Any]) -> None:
    """For every GGUF file the stand-in serves: padded header + every tensor padded to the alignment = the file's size."""
    assert set(headers) == {*TINY, BIG}
    for repo, files in headers.items():
        for name, (meta, tensors, offset, size) in files.items():
            align = meta.get("general.alignment", 32)
            assert offset + sum(-(-tensor_bytes(s, t) // align) * align for _, s, t in tensors) == size, (repo, name)


def test_weight_rows_are_the_sum_of_the_tensors_in_the_headers(hub_server: str, headers: dict[str, Any]) -> None:
    results = drive(hub_server, [{"model": repo} for repo in headers])
    for repo, result in zip(headers, results, strict=True):
        expected: dict[str, int] = {}
        for name, (_meta, tensors, _offset, _size) in headers[repo].items():
            label = name.removesuffix(".gguf").split("-0000")[0].rsplit("-", 1)[-1].upper()
            expected[label] = expected.get(label, 0) + sum(tensor_bytes(s, t) for _, s, t in tensors)
        assert {row["dtype"]: row["total_bytes"] for row in result["rows"]} == expected, repo
        assert all(row["method"] == "stored" and row["peak_bytes"] is None for row in result["rows"])


def test_tiny_files_downloaded_whole_read_the_same_with_gguf_py(hub_server: str, headers: dict[str, Any], tmp_path: Path) -> None:
    """gguf-py's own reader on the whole file (tensor data included) counts the same tensor bytes."""
    from gguf import GGUFReader

    from estimator.gguf.header import ArrayLength, parse_header

    for repo in TINY:
        for name, (_meta, tensors, offset, size) in headers[repo].items():
            data, whole = served(hub_server, repo, name)
            assert len(data) == whole == size
            path = tmp_path / name
            path.write_bytes(data)
            reader = GGUFReader(path)
            assert reader.data_offset == offset
            assert sum(int(t.n_bytes) for t in reader.tensors) == sum(tensor_bytes(s, t) for _, s, t in tensors)
            ours = parse_header(data, size, name)  # the estimator's own reader agrees with gguf-py's, tensor by tensor
            assert ours is not None and ours.data_offset == reader.data_offset and ours.alignment == reader.alignment
            assert [(t.name, t.ggml_type, t.shape, t.n_bytes) for t in ours.tensors] == [
                (t.name, t.tensor_type.name, tuple(int(d) for d in t.shape), int(t.n_bytes)) for t in reader.tensors
            ]
            for key, field in reader.fields.items():
                if not key.startswith("GGUF.") and not isinstance(ours.metadata[key], ArrayLength):
                    assert ours.metadata[key] == pytest.approx(field.contents()), key


def test_stored_headers_are_what_the_generator_writes() -> None:
    """tests/hub_data/gguf/ is reproducible: testkit/gguf_models.py writes the same headers and sizes."""
    for repo, files in MANIFEST.items():
        written = gguf_models.headers(repo)
        assert {name: size for name, (_h, size) in written.items()} == files
        for name, (header, _size) in written.items():
            assert (DATA / "gguf" / repo / f"{name}.header").read_bytes() == header


# ------------------------------------------------------------------ KV cache, independently


def kv_truth(meta: dict[str, Any], n_ctx: int, cache: str, n_ubatch: int = 512) -> int:
    """llama_kv_cache's allocation, counted layer by layer from the GGUF metadata (one sequence, swa_full off)."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    arch = meta["general.architecture"]
    layers, n_embd = meta[f"{arch}.block_count"], meta[f"{arch}.embedding_length"]
    heads, kv_heads = meta[f"{arch}.attention.head_count"], meta[f"{arch}.attention.head_count_kv"]
    k_len = meta.get(f"{arch}.attention.key_length", n_embd // heads)
    v_len = meta.get(f"{arch}.attention.value_length", n_embd // heads)
    block, size = GGML_QUANT_SIZES[GGMLQuantizationType[cache.upper()]]
    cells = math.ceil(n_ctx / 256) * 256
    window = meta.get(f"{arch}.attention.sliding_window")
    total = 0
    for layer in range(layers):
        sliding = arch == "gemma3" and window and layer % 6 != 5  # Gemma 3: five local layers, then a global one
        n = min(cells, math.ceil((window + n_ubatch) / 256) * 256) if sliding else cells
        v_row = 0 if f"{arch}.attention.key_length_mla" in meta else kv_heads * v_len // block * size  # MLA: K holds the latent, no V
        total += n * (kv_heads * k_len // block * size + v_row)
    return total


def test_kv_cache_matches_an_independent_count(hub_server: str, headers: dict[str, Any]) -> None:
    cases, expected = [], []
    for repo in (*TINY, BIG):
        name = next(iter(headers[repo]))
        meta = headers[repo][name][0]
        for n_ctx in (500, 4096):
            for cache in ("f16", "q8_0", "q4_0"):
                cases.append({"model": repo, "kwargs": {"mode": "inference", "ctx": n_ctx, "cache_type": cache, "gguf_file": name}})
                expected.append(kv_truth(meta, n_ctx, cache))
    for case, result, truth in zip(cases, drive(hub_server, cases), expected, strict=True):
        assert result["rows"][0]["components"]["kv_cache"] == truth, case
        row = result["rows"][0]
        assert row["peak_bytes"] == sum(row["components"].values()) and row["components"]["weights"] == row["total_bytes"]


def test_llama_8b_kv_cache_at_its_full_context_is_16_gib(hub_server: str) -> None:
    """Llama-3.1-8B: 32 layers x 8 KV heads x 128 x (K + V) x 2 bytes = 128 KiB per token; 131,072 tokens = 16 GiB."""
    (result,) = drive(hub_server, [{"model": BIG, "kwargs": {"mode": "inference", "gguf_file": "Q4_K_M"}}])
    assert result["options"]["ctx"] == 131072 and result["rows"][0]["components"]["kv_cache"] == 16 * 1024**3


# ------------------------------------------------------------------ offload, options, refusals


def test_gpu_split_is_the_most_layers_that_fit(hub_server: str) -> None:
    (t4,) = drive(hub_server, [{"model": BIG, "kwargs": {"mode": "inference", "gguf_file": "Q8_0", "gpu": "T4"}}])
    split = t4["rows"][0]["offload"]
    capacity = find_gpu("T4").total_bytes - CUDA_CONTEXT_BYTES  # what the T4's driver reports, less the CUDA context
    assert 0 < split["n_gpu_layers"] < split["n_offloadable"] == 33 and split["gpu_bytes"] <= capacity
    one_more = drive(hub_server, [{"model": BIG, "kwargs": {"mode": "inference", "gguf_file": "Q8_0", "n_gpu_layers": split["n_gpu_layers"] + 1}}])
    assert one_more[0]["rows"][0]["offload"]["gpu_bytes"] > capacity
    row = t4["rows"][0]
    assert split["gpu_bytes"] + split["cpu_bytes"] >= row["peak_bytes"]  # layers on the GPU are counted in ggml-cuda's padded sizes


def test_offload_counts_every_byte_once_on_the_cpu_side(hub_server: str) -> None:
    for repo in TINY:
        (result,) = drive(hub_server, [{"model": repo, "kwargs": {"mode": "inference", "ctx": 1024, "n_gpu_layers": 0}}])
        for row in result["rows"]:
            assert row["offload"]["gpu_bytes"] == 0 and row["offload"]["cpu_bytes"] == row["peak_bytes"]


def test_gguf_options_and_refusals(hub_server: str) -> None:
    one = cli(hub_server, "estimator-test/gguf-only", "--mode", "inference", "--gguf-file", "tiny-Q8_0.gguf", "--ctx", "2048", "--format", "json")
    assert one.returncode == 0, one.stderr
    data = json.loads(one.stdout)
    assert [row["dtype"] for row in data["rows"]] == ["Q8_0"] and data["options"]["ctx"] == 2048 and data["options"]["gguf_file"] == "tiny-Q8_0.gguf"
    refusals = {
        ("estimator-test/gguf-only", "--gguf-file", "nope.gguf"): ["--gguf-file", "tiny-Q8_0.gguf"],
        ("estimator-test/gguf-only", "--mode", "inference", "--cache-type", "q8_0", "--flash-attn", "off"): ["flash attention", "--flash-attn"],
        ("estimator-test/gguf-only", "--cache-type", "q3"): ["--cache-type must be one of"],
        ("estimator-test/gguf-only", "--mode", "inference", "--gpu", "Voodoo2"): ["is not a GPU we know", "L4"],
        ("estimator-test/tiny-llama", "--ctx", "4096"): ["--ctx applies to GGUF files"],
        # vLLM's plan is not llama.cpp's: refused, not answered with inference rows labelled serving
        ("estimator-test/gguf-only", "--mode", "serving", "--gpu", "L4"): ["--mode serving is not available", "--mode load or inference"],
        ("estimator-test/gguf-only", "--mode", "inference", "--batch-size", "2"): ["--batch-size 2", "one sequence"],
    }
    for args, words in refusals.items():
        done = cli(hub_server, *args)
        assert done.returncode == 2 and done.stdout == "", (args, done.stderr)
        line = done.stderr.strip()
        assert len(line.splitlines()) == 1 and all(word in line for word in words), (args, line)


# ------------------------------------------------------------------ against llama.cpp itself


def test_against_llama_cpp() -> None:
    """llama.cpp's own byte counts for the tiny models (bench/gguf_llamacpp.py): weights and KV exact, compute within 5%."""
    from bench import gguf_llamacpp

    probe = gguf_llamacpp.probe_path()
    if probe is None:
        pytest.skip("llama.cpp is not installed here: set LLAMA_CPP_LIB and LLAMA_CPP_SRC (docs/gguf.md); the counts above still run")
    cases = gguf_llamacpp.run(probe, variants=False)
    assert cases
    for case in cases:
        assert case.ours["weights"] == case.theirs["model_size"] == case.theirs["mapped"], case
        assert case.ours["kv"] == case.theirs["kv"], case
        assert abs(case.compute_error) <= gguf_llamacpp.COMPUTE_TOLERANCE, case  # the bound (5%)


def test_compute_buffer_against_llama_cpps_recorded_counts() -> None:
    """Without llama.cpp at hand: the compute buffers llama.cpp allocated in the last bench run (its own byte counts, read
    from bench/results/gguf_llamacpp.md, every model and shape of the bench) against ours from the headers: within 5%
    wherever the bench found it so, and never further off than it recorded (a change to the formula that makes any case
    worse fails here, before the bench is run again)."""
    import re

    from bench import gguf_llamacpp
    from estimator.gguf import compute, kv_cache
    from estimator.gguf.header import parse_header
    from estimator.gguf.hparams import hparams

    gguf_llamacpp.register_variants()
    files = {name: (repo, data) for repo in gguf_llamacpp.REPOS + tuple(gguf_llamacpp.VARIANTS) for name, data in gguf_models.headers(repo).items()}
    row = re.compile(r"\| (\S+\.gguf)(?: \(\+1 part\))? \| (\d+) \| (\w+) \| (on|off) \|.*\| ([\d,]+) / ([\d,]+) \| ([-+][\d.]+)% \|$")
    seen = 0
    for line in gguf_llamacpp.RESULTS.read_text().splitlines():
        m = row.match(line)
        if not m:
            continue
        name, n_ctx, cache, flash, theirs, recorded = m[1], int(m[2]), m[3], m[4] == "on", int(m[6].replace(",", "")), float(m[7]) / 100
        header = parse_header(files[name][1][0], files[name][1][1], name)
        assert header is not None
        hp = hparams(header)
        kv = kv_cache.kv_cache(hp, n_ctx, type_k=cache, type_v=cache, flash_attn=flash)
        error = compute.buffers(hp, kv, flash_attn=flash, type_k=cache, type_v=cache).compute / theirs - 1
        assert abs(error) <= abs(recorded) + 0.0005, (line, error)  # the table rounds to 0.1%
        if abs(recorded) <= gguf_llamacpp.COMPUTE_TOLERANCE:
            assert abs(error) <= gguf_llamacpp.COMPUTE_TOLERANCE, (line, error)
        seen += 1
    assert seen >= 150  # every row of the bench table


def test_header_reads_grow_until_the_header_is_whole() -> None:
    """A first read far shorter than the header: the reads grow (x4) until gguf-py parses a header ending inside them."""
    from estimator.errors import MalformedConfigError
    from estimator.gguf.header import read_header

    for repo, files in MANIFEST.items():
        for name, size in files.items():
            stored = (DATA / "gguf" / repo / f"{name}.header").read_bytes()
            asked: list[tuple[int, int]] = []

            def read(start: int, stop: int, stored: bytes = stored, size: int = size, asked: list[tuple[int, int]] = asked) -> bytes:
                asked.append((start, stop))
                return (stored + bytes(max(0, min(stop, size) - len(stored))))[start:min(stop, size)]

            header = read_header(name, size, read, first_read=1024)
            meta, tensors, offset = parse(stored + bytes(64))
            assert header.data_offset == offset and header.padded_end == size
            assert [(t.name, t.shape) for t in header.tensors] == [(n, s) for n, s, _ in tensors]
            assert header.metadata.get("general.architecture") == meta.get("general.architecture")
            assert asked[0] == (0, 1024) and all(a[1] == b[0] for a, b in zip(asked, asked[1:], strict=False))
    with pytest.raises(MalformedConfigError, match="not a GGUF file"):
        read_header("x.gguf", 4096, lambda start, stop: b"PK\x03\x04" + bytes(stop - start - 4))
    cut = (DATA / "gguf" / "estimator-test" / "gguf-only" / "tiny-Q8_0.gguf.header").read_bytes()[:5000]
    with pytest.raises(MalformedConfigError, match="ends inside its GGUF header"):
        read_header("cut.gguf", len(cut), lambda start, stop: cut[start:stop])


def test_seq_len_sets_the_context_when_ctx_is_not_given(hub_server: str) -> None:
    """The page's sequence field (seq_len + max_new_tokens) is the GGUF context unless --ctx is given; one sequence only."""
    cases = [
        {"model": "estimator-test/gguf-only", "kwargs": {"mode": "inference", "seq_len": 1000, "max_new_tokens": 200, "gguf_file": "Q8_0"}},
        {"model": "estimator-test/gguf-only", "kwargs": {"mode": "inference", "ctx": 1200, "gguf_file": "Q8_0"}},
        {"model": "estimator-test/gguf-only", "kwargs": {"mode": "inference", "seq_len": 9000, "ctx": 1200, "gguf_file": "Q8_0"}},
        {"model": "estimator-test/gguf-only", "kwargs": {"mode": "inference", "batch_size": 2}},
    ]
    by_seq, by_ctx, both, batch = drive(hub_server, cases)
    assert by_seq["rows"][0]["components"] == by_ctx["rows"][0]["components"] == both["rows"][0]["components"]
    assert by_seq["options"]["ctx"] == 1200 and "seq_len + max_new_tokens" in " ".join(by_seq["rows"][0]["notes"])
    assert batch["error"] == "UnsupportedError" and "--batch-size 2" in batch["message"] and "one sequence" in batch["message"]


def _header(arch: str, **keys: Any) -> Any:
    from estimator.gguf.header import GGUFHeader

    meta = {"general.architecture": arch, **{f"{arch}.{k.replace('__', '.')}": v for k, v in keys.items()}}
    return GGUFHeader(filename=f"{arch}.gguf", file_size=0, data_offset=0, alignment=32, metadata=meta, tensors=())


def test_llama_cpp_layer_rules_from_metadata() -> None:
    """Sliding-window patterns, per-layer KV heads and cache-less architectures, as llama.cpp's model code sets them."""
    from estimator.gguf.hparams import hparams
    from estimator.gguf.kv_cache import kv_cache

    # Gemma-2: every other layer local (set_swa_pattern(2): il % 2 < 1), a 4096 window when the file states none
    g2 = hparams(_header("gemma2", block_count=6, embedding_length=256, attention__head_count=4, attention__head_count_kv=2))
    assert g2.is_swa == (True, False, True, False, True, False) and g2.n_swa == 4096
    kv = kv_cache(g2, 32768)
    assert (kv.cells, kv.swa_cells) == (32768, 4608) and kv.total == 3 * 2 * 128 * 2 * (32768 + 4608)
    # a stated pattern array wins over the architecture's default
    pat = hparams(_header("gemma3", block_count=4, embedding_length=256, attention__head_count=4, attention__sliding_window=128,
                          attention__sliding_window_pattern=[True, True, False, False]))
    assert pat.is_swa == (True, True, False, False)
    # per-layer KV heads: a layer with none holds no cache
    mixed = hparams(_header("llama", block_count=3, embedding_length=256, attention__head_count=4, attention__head_count_kv=[2, 0, 4]))
    assert kv_cache(mixed, 256).layers == (256 * 2 * 128 * 2, 0, 256 * 2 * 256 * 2)
    # encoders and diffusion models run without a KV cache
    bert = hparams(_header("bert", block_count=12, embedding_length=768, attention__head_count=12))
    assert kv_cache(bert, 512).total == 0
