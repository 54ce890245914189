"""Will it fit: GPU capacities as data, the runtime overhead, and the fit solver's answers.

The solver's answers are checked from outside: at the reported largest batch (and sequence) a
fresh estimate's peak plus runtime overhead is within the capacity, and one step more is not —
for inference and training, three models, two capacities each (a little and a lot above batch 2's needs;
``bench/fit_speed.py`` times the solver).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from estimator import estimate
from estimator.errors import BadOptionError
from estimator.fit import runtime
from estimator.fit.gpus import GPUS, custom_gpu, find_gpu, parse_memory
from estimator.fit.plan import SEQ_STEP, _seq_guess
from estimator.fit.solver import largest_fitting

MiB = 1024**2
SMALL = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 1000,
         "max_position_embeddings": 1024}
MODELS = {
    "llama": {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "num_key_value_heads": 2, **SMALL},
    "bert": {"model_type": "bert", "architectures": ["BertForMaskedLM"], **SMALL},
    "resnet": {"architecture": "resnet18", "num_classes": 10, "pretrained_cfg": {"input_size": [3, 64, 64]}},
}


def test_every_gpu_of_the_issue_is_listed_with_its_source() -> None:
    names = {g.name for g in GPUS}
    for wanted in ("T4", "L4", "A10G", "RTX 3090", "RTX 4090", "RTX 5090", "A100 40GB", "A100 80GB", "H100 80GB", "H200", "B200", "MI300X"):
        assert wanted in names
    from estimator.speed.hardware import apple_working_set, find_hardware

    for gpu in GPUS:
        assert gpu.source and gpu.stated
        stated_gb = float(gpu.stated.split()[0])
        if gpu.smi_mib is None:  # from the hardware table (estimator.speed.hardware): stated memory, or Metal's working set
            hw = find_hardware(gpu.name)
            assert gpu.total_bytes == hw.usable_bytes and hw.source in gpu.source, gpu.name
            if gpu.vendor == "apple":
                assert gpu.total_bytes == apple_working_set(hw.memory_bytes) and "working set" in gpu.source, gpu.name
                continue
            assert "stated" in gpu.source
        else:  # what PyTorch can use is below nvidia-smi's total (the driver keeps some), within 1 GiB
            assert 0 <= gpu.smi_mib * MiB - gpu.total_bytes < 1024 * MiB, gpu.name
        assert 0.85 * stated_gb * 10**9 < gpu.total_bytes <= 1.1 * stated_gb * 2**30, gpu.name
        if gpu.vendor == "nvidia":  # bfloat16 units from Ampere (compute capability 8.0) on
            assert gpu.native_bf16 == (float(gpu.compute_capability or 0) >= 8.0), gpu.name


def test_gpu_names_are_found_the_way_people_write_them() -> None:
    assert find_gpu("H100-80GB").name == "H100 80GB"
    assert find_gpu("a100-80gb").name == "A100 80GB"
    assert find_gpu("NVIDIA L4").name == "L4"
    with pytest.raises(BadOptionError, match="gpu_memory|is not a GPU we know"):
        find_gpu("RTX 9999")
    assert parse_memory("24GiB") == 24 * 2**30
    assert parse_memory("80GB") == 80 * 10**9
    assert parse_memory("16384MiB") == 16 * 2**30
    for bad in ("lots", "24 furlongs", "0.5", "1KiB"):
        with pytest.raises(BadOptionError):
            parse_memory(bad)
    assert custom_gpu("24GiB").total_bytes == 24 * 2**30


def test_cublas_workspaces_follow_pytorch_s_rule() -> None:
    # CublasHandlePool.cpp: ":4096:8" on sm90, else ":4096:2:16:8"; one handle per thread
    assert runtime.cublas_workspace_bytes(find_gpu("H100 80GB"), "inference") == 4096 * 1024 * 8
    assert runtime.cublas_workspace_bytes(find_gpu("L4"), "inference") == 4096 * 1024 * 2 + 16 * 1024 * 8
    assert runtime.cublas_workspace_bytes(find_gpu("L4"), "training") == 2 * (4096 * 1024 * 2 + 16 * 1024 * 8)
    assert runtime.cublas_workspace_bytes(find_gpu("L4"), "load") == 0


def test_the_solver_finds_the_boundary_of_monotone_functions() -> None:
    rng = random.Random(7)
    for _ in range(400):
        a, b, c = rng.randint(10**6, 10**10), rng.randint(10**3, 10**8), rng.choice([0, rng.randint(0, 10**4)])
        step = rng.choice([1, 512, 2**21])

        def needed(x: int, a: int = a, b: int = b, c: int = c, step: int = step) -> int:
            return -(-(a + b * x + c * x * x) // step) * step

        capacity, limit = rng.randint(10**6, 10**11), rng.choice([64, 4096, 131072])
        found = largest_fitting(needed, capacity, limit=limit)
        if found.value is None:
            assert needed(1) > capacity
        else:
            assert needed(found.value) <= capacity
            assert found.value == limit or needed(found.value + 1) > capacity


def test_any_guess_gives_the_exhaustive_scan_s_boundary() -> None:
    """Right, one off, far off or past the limit: the search from a guess names the value an exhaustive scan does."""
    rng = random.Random(11)
    for _ in range(300):
        a, b, c = rng.randint(10**6, 10**10), rng.randint(10**3, 10**8), rng.choice([0, rng.randint(0, 10**4)])
        step = rng.choice([1, 512, 2**21])

        def needed(x: int, a: int = a, b: int = b, c: int = c, step: int = step) -> tuple[int, int]:
            return -(-(a + b * x + c * x * x) // step) * step, a + b * x + c * x * x

        capacity, limit = rng.randint(10**6, 2 * 10**10), rng.choice([64, 1024])
        scan = next((x - 1 for x in range(1, limit + 1) if needed(x)[0] > capacity), limit) or None
        known = {1: needed(1)} if rng.random() < 0.5 else {}
        for guess in (scan or 1, (scan or 1) + 1, rng.randint(1, 3 * limit)):
            found = largest_fitting(needed, capacity, limit=limit, known=known, guess=guess)
            assert found.value == scan, (a, b, c, step, capacity, limit, guess)


def test_the_sequence_guess_from_the_batch_search_where_the_need_grows_as_batch_times_length() -> None:
    """Where what grows is a row per token of every sequence (bytes a + k b s), the batch search's points give the
    longest sequence exactly, from a larger or a smaller batch; none, or a need that does not grow, give no guess."""
    rng = random.Random(5)
    for _ in range(200):
        a, k, b0, s0 = rng.randint(10**8, 10**10), rng.randint(10**3, 10**6), rng.randint(1, 8), rng.choice([128, 512, 8192])
        longest = rng.randint(1, 10**5)
        capacity = a + k * b0 * longest

        def need(b: int, s: int, a: int = a, k: int = k) -> int:
            return a + k * b * s

        for b1 in {max(1, b0 - 1), b0 + 1, b0 + 3} - {b0}:
            assert _seq_guess({b0: need(b0, s0), b1: need(b1, s0)}, b0, s0, need(b0, s0), capacity) == longest
    assert _seq_guess({2: 10**9}, 2, 512, 10**9, 2 * 10**9) is None  # the batch search simulated nothing else
    assert _seq_guess({2: 10**9, 3: 10**9}, 2, 512, 10**9, 2 * 10**9) is None  # nothing grows with the batch


def _needed(folder: Path, mode: str, gpu_memory: str, **shape: int) -> int:
    """Peak plus runtime overhead of a fresh estimate at ``shape``, added up here."""
    row = estimate(str(folder), mode=mode, dtypes="float32", **shape).rows[0]  # type: ignore[arg-type]
    assert row.peak_bytes is not None and row.runtime_overhead is not None
    gpu = custom_gpu(gpu_memory)
    return (row.peak_bytes + sum(row.runtime_overhead.values()) + runtime.CUDA_CONTEXT_BYTES
            + runtime.cublas_workspace_bytes(gpu, mode))


@pytest.mark.parametrize("mode", ["inference", "training"])
@pytest.mark.parametrize("model", sorted(MODELS))
def test_the_largest_batch_and_sequence_fit_and_one_more_does_not(model: str, mode: str, tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(MODELS[model]))
    text = model != "resnet"
    shape = {"batch_size": 2, **({"seq_len": 64} if text else {"image_size": 64})}
    base = estimate(str(tmp_path), mode=mode, dtypes="float32", **shape).rows[0]  # type: ignore[arg-type]
    assert base.peak_bytes is not None
    floor = base.peak_bytes + runtime.CUDA_CONTEXT_BYTES + 64 * MiB
    for extra in (8, 400):  # two capacities: a little and a lot above batch 2's needs
        memory = f"{(floor + extra * base.peak_bytes // 8) // MiB}MiB"
        fitted = estimate(str(tmp_path), mode=mode, dtypes="float32", gpu_memory=memory, **shape).rows[0]  # type: ignore[arg-type]
        fit = fitted.fit
        assert fit is not None and fit["fits"] is True
        capacity = parse_memory(memory)
        best = fit["max_batch_size"]
        assert best is not None and best >= 2
        assert _needed(tmp_path, mode, memory, **{**shape, "batch_size": best}) <= capacity
        assert _needed(tmp_path, mode, memory, **{**shape, "batch_size": best + 1}) > capacity
        if text:
            longest, limit = fit["max_seq_len"], MODELS[model]["max_position_embeddings"]
            assert longest is not None and longest >= 64
            assert longest % SEQ_STEP == 0 or longest == limit  # the sequence is searched in steps of SEQ_STEP tokens
            assert fit["seq_boundary"]["step"] == SEQ_STEP
            assert _needed(tmp_path, mode, memory, **{**shape, "seq_len": longest}) <= capacity
            if longest < limit:
                assert _needed(tmp_path, mode, memory, **{**shape, "seq_len": min(longest + SEQ_STEP, limit)}) > capacity


def test_gpu_options_refused_clearly() -> None:
    with pytest.raises(BadOptionError, match="give one of them"):
        estimate("gpt2", gpu="L4", gpu_memory="24GiB")
    with pytest.raises(BadOptionError, match="device"):
        estimate("gpt2", gpu="L4", device="cpu", mode="inference")
    with pytest.raises(BadOptionError, match="not a GPU we know"):
        estimate("gpt2", gpu="Voodoo 5")


@pytest.mark.parametrize("mode", ["inference", "training"])
def test_the_guided_search_gives_the_exhaustive_search_s_boundaries(mode: str, tmp_path: Path) -> None:
    """The fit search starts from a guess and simulates a handful of shapes; an exhaustive scan simulates
    every batch size (every step of sequence length) from the smallest up to the first that does not fit.
    Both must name the same largest batch and longest sequence, with the same bytes at the boundary."""
    (tmp_path / "config.json").write_text(json.dumps(MODELS["llama"]))
    shape = {"batch_size": 2, "seq_len": 256}
    base = estimate(str(tmp_path), mode=mode, dtypes="float32", **shape).rows[0]  # type: ignore[arg-type]
    assert base.peak_bytes is not None
    # room for four more peaks of this shape beside its need: boundaries some ten to twenty batch sizes and sequence
    # steps away, so the exhaustive scans below stay short (the search over long ranges: test_any_guess_gives_...)
    memory = f"{-(-(_needed(tmp_path, mode, '1GiB', **shape) + 4 * base.peak_bytes) // MiB)}MiB"
    capacity = parse_memory(memory)
    fit = estimate(str(tmp_path), mode=mode, dtypes="float32", gpu_memory=memory, **shape).rows[0].fit  # type: ignore[arg-type]
    assert fit is not None

    def scan(knob: str, values: range) -> tuple[int | None, int | None, int]:
        """The last value that fits before the first that does not, the bytes there, and the simulations."""
        last, at_last, count = None, None, 0
        for value in values:
            count += 1
            needed = _needed(tmp_path, mode, memory, **{**shape, knob: value})
            if needed > capacity:
                return last, at_last, count
            last, at_last = value, needed
        return last, at_last, count

    best, at_best, scanned = scan("batch_size", range(1, 200))
    assert (fit["max_batch_size"], fit["batch_boundary"]["needed_at_max"]) == (best, at_best)
    assert fit["batch_boundary"]["simulations"] < scanned
    limit = MODELS["llama"]["max_position_embeddings"]
    longest, at_longest, scanned = scan("seq_len", range(SEQ_STEP, limit + 1, SEQ_STEP))
    assert (fit["max_seq_len"], fit["seq_boundary"]["needed_at_max"]) == (longest, at_longest)
    assert fit["seq_boundary"]["simulations"] < scanned
