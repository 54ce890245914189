"""``--attn-implementation``: the attention kernel the simulated step runs (issue 32, item 5).

Truth is the CPU allocator's peak of the real run (``testkit.attn_truth``: ``testkit.peak_truth.measure_workload``,
torch.profiler, the model built inside the profile, a fresh forked process per case, as tests/test_peak_accuracy.py
measures): a Llama of 2 layers, 4 heads, on a 1,024-token prompt, built with transformers' ``attn_implementation`` eager and sdpa, against
``estimate()`` of the same config from a local folder with ``attn_implementation`` given (the option's whole path:
parse, build, simulate). Eager materialises the score matrices (4 heads x 1,024 x 1,024 float32 = 16 MiB each);
SDPA's CPU kernel does not.
"""

from __future__ import annotations

import functools
import json
import multiprocessing as mp
from pathlib import Path
from typing import Any

import pytest

from estimator import estimate
from estimator.errors import BadOptionError, UnsupportedError
from testkit.attn_truth import CONFIG, SEQ
from testkit.peak_pool import _truth_job, measured_there_simulated_here

SCORES = 4 * SEQ * SEQ * 4  # one layer's score matrices: heads x L x L, float32
TOLERANCE = 0.02
MODES = ["inference", "training"]
KERNELS = ["eager", "sdpa"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("llama")
    (path / "config.json").write_text(json.dumps(CONFIG))
    return path


def _job(folder: str, job: tuple[str, str, str]) -> tuple[tuple[str, str, str], Any]:
    """A truth (testkit.attn_truth, in a forked child) or the ``estimate()`` row of the same kernel and mode (here)."""
    kind, kernel, mode = job
    if kind == "truth":
        return _truth_job("testkit.attn_truth", job)
    return job, simulated(Path(folder), mode=mode, attn_implementation=kernel)


@pytest.fixture(scope="module")
def peaks(folder: Path) -> dict[tuple[str, str, str], Any]:
    """The allocator's peak for each kernel and mode, each run in its own fresh process (testkit.attn_truth, forked
    by testkit.peak_pool from a server that has imported torch and transformers), and meanwhile in this process the
    simulated row of each (``("row", kernel, mode)``)."""
    jobs = [(kind, kernel, mode) for mode in MODES for kernel in KERNELS for kind in ("truth", "row")]
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "transformers", "estimator.peak", "testkit.attn_truth"])
    return measured_there_simulated_here(ctx, functools.partial(_job, str(folder)), jobs, processes=2)


def truth(peaks: dict[tuple[str, str, str], Any], kernel: str, mode: str) -> int:
    value = peaks[("truth", kernel, mode)]
    assert isinstance(value, int), f"ground truth failed: {value}"
    return value


def simulated(folder: Path, **kwargs: Any) -> Any:
    (row,) = estimate(str(folder), dtypes="float32", seq_len=SEQ, **{"mode": "inference", "device": "cpu", **kwargs}).rows
    assert row.method == "simulated", row.notes
    return row


@pytest.mark.parametrize("mode", MODES)
def test_eager_and_sdpa_on_the_cpu_allocator(folder: Path, mode: str, peaks: dict[tuple[str, str, str], Any]) -> None:
    measured = {kernel: truth(peaks, kernel, mode) for kernel in KERNELS}
    rows = {kernel: peaks[("row", kernel, mode)] for kernel in KERNELS}
    for kernel, row in rows.items():
        error = (row.peak_bytes - measured[kernel]) / measured[kernel]
        assert abs(error) <= TOLERANCE, (kernel, mode, row.peak_bytes, measured[kernel], f"{error:+.2%}")
        assert f"attention: {kernel} (asked)" in row.notes
    # eager holds score matrices that sdpa never makes: the difference is at least one layer's, and the simulation
    # finds the measured difference
    gap_measured = measured["eager"] - measured["sdpa"]
    gap_simulated = rows["eager"].peak_bytes - rows["sdpa"].peak_bytes
    assert gap_measured >= SCORES and abs(gap_simulated - gap_measured) <= TOLERANCE * gap_measured, (gap_simulated, gap_measured)
    if mode == "inference":  # transformers' default for this model, on CPU: sdpa
        default = simulated(folder)
        assert default.peak_bytes == rows["sdpa"].peak_bytes and "attention: sdpa (transformers default for this model)" in default.notes


def test_flash_attention_2_on_cuda(folder: Path) -> None:
    """No score matrix: out and softmax_lse (FlashAttention-2's mha_fwd), as SDPA's own flash backend; eager holds the scores."""
    rows = {kernel: estimate(str(folder), dtypes=["bfloat16", "float32"], seq_len=SEQ, mode="inference", attn_implementation=kernel)
            for kernel in ("eager", "sdpa", "flash_attention_2")}
    flash, flash32 = rows["flash_attention_2"].rows
    assert flash.method == "simulated" and "attention: flash_attention_2 (asked)" in flash.notes
    assert flash32.peak_bytes is None and any("flash_attention_2 runs in float16 and bfloat16 only" in n for n in flash32.notes)
    eager, sdpa = rows["eager"].rows[0], rows["sdpa"].rows[0]
    assert flash.peak_bytes == sdpa.peak_bytes  # bf16, no mask: CUDA's SDPA picks its flash backend (FlashAttention-2)
    assert eager.peak_bytes - flash.peak_bytes >= 4 * SEQ * SEQ * 2  # at least one layer's bfloat16 scores
    assert rows["flash_attention_2"].options["attn_implementation"] == "flash_attention_2"


def test_refusals(folder: Path) -> None:
    with pytest.raises(BadOptionError, match="flash_attention_2 runs on CUDA GPUs only"):
        estimate(str(folder), mode="inference", device="cpu", attn_implementation="flash_attention_2")
    with pytest.raises(UnsupportedError, match="flex_attention is not simulated yet"):
        estimate(str(folder), mode="inference", attn_implementation="flex_attention")
    with pytest.raises(BadOptionError, match="shapes .*inference and training"):
        estimate(str(folder), attn_implementation="eager")
    with pytest.raises(BadOptionError, match="must be one of"):
        estimate(str(folder), mode="inference", attn_implementation="flash")


def test_a_kernel_the_model_cannot_run_is_refused() -> None:
    """A module without a transformers config, and a class transformers does not run flash_attention_2 for."""
    import torch
    import transformers

    from estimator.peak.kernels.attention import set_attention

    with pytest.raises(UnsupportedError, match="is not one: drop it"):
        set_attention(torch.nn.Linear(2, 2), "eager")
    kwargs = {k: v for k, v in CONFIG.items() if k not in ("architectures", "model_type")}
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM._from_config(transformers.LlamaConfig(**kwargs), dtype=torch.bfloat16)
    assert set_attention(model, None) == "sdpa"
    model._supports_flash_attn = False  # as a class without FlashAttention support says
    with pytest.raises(UnsupportedError, match="transformers does not support it"):
        set_attention(model, "flash_attention_2")


    def refuse(implementation: str) -> None:  # what transformers raises for a class without that kernel
        raise ValueError(f"{type(model).__name__} does not support an attention implementation through {implementation} yet.")

    model.set_attn_implementation = refuse  # type: ignore[method-assign,assignment]
    with pytest.raises(UnsupportedError, match="eager: transformers refuses it for LlamaForCausalLM .*does not support"):
        set_attention(model, "eager")
