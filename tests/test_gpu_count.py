"""How many GPUs: the pure search (estimator.fit.count) against an exhaustive one, and the page's words for its answer."""

from __future__ import annotations

from pathlib import Path

import pytest

from estimator import estimate
from estimator.errors import BadOptionError
from estimator.fit.count import DDP_NOTE, GPUCount, Trial, counts, fewest_gpus, layout
from estimator.gpu_count import count_gpus, serving_layout
from estimator_app.howmany import sentence

GiB = 1024**3


def test_counts_are_one_node_then_whole_nodes() -> None:
    assert counts() == (1, 2, 4, 8, 16, 32, 64)
    assert counts(6) == (1, 2, 4) and counts(1) == (1,)
    assert [layout(n) for n in (1, 4, 8, 16, 64)] == [(1, 1), (4, 1), (8, 1), (8, 2), (8, 8)]


@pytest.mark.parametrize("shape", ["sharded", "bumpy", "never", "always"])
def test_the_answer_is_the_fewest_count_that_fits_as_an_exhaustive_search_finds(shape: str) -> None:
    capacity = 24 * GiB
    per_gpu = {
        "sharded": lambda n: 2 * GiB + 120 * GiB // n,  # model states split, activations not
        "bumpy": lambda n: {1: 90, 2: 20, 4: 30, 8: 10}.get(n, 5) * GiB,  # no monotonicity assumed
        "never": lambda n: 100 * GiB,
        "always": lambda n: 1 * GiB,
    }[shape]
    asked: list[int] = []

    def trial(n: int) -> Trial:
        asked.append(n)
        return Trial(n, per_gpu(n), capacity, f"fsdp over {n} GPUs")

    found = fewest_gpus(trial, "RTX 4090", capacity)
    exhaustive = next((n for n in counts() if per_gpu(n) <= capacity), None)
    assert found.gpus == exhaustive
    assert asked == [n for n in counts() if exhaustive is None or n <= exhaustive]  # none tried past the answer
    if found.answer is not None:
        assert found.answer.needed_bytes == per_gpu(found.answer.gpus) <= capacity
        if found.below is not None:
            assert not found.below.fits and found.below.gpus < found.answer.gpus


def test_a_trial_without_a_figure_never_fits_and_a_use_s_own_verdict_counts() -> None:
    assert not Trial(2, None, GiB, "tp 2", reason="heads not divisible").fits
    assert Trial(1, None, GiB, "1 GPU", verdict=True).fits and not Trial(1, None, GiB, "1 GPU", verdict=False).fits
    assert not Trial(1, 2 * GiB, GiB, "1 GPU", verdict=True).fits


def test_the_page_says_the_count_and_the_figure_per_gpu_times_n() -> None:
    trials = (Trial(1, 30 * GiB, 24 * GiB, "1 GPU"), Trial(2, 20 * GiB, 24 * GiB, "fsdp over 2 GPUs", details={"method": "simulated"}))
    text = sentence("bfloat16", GPUCount("RTX 4090", 24 * GiB, trials))
    assert text == "bfloat16: 2 × RTX 4090 (fsdp over 2 GPUs): 20.00 GiB per GPU (× 2) of 24.00 GiB; 1 does not fit (30.00 GiB)."
    none = sentence("float32", GPUCount("T4", GiB, (Trial(1, 2 * GiB, GiB, "1 GPU"), Trial(2, 2 * GiB, GiB, "ddp over 2 GPUs")), note=DDP_NOTE))
    assert none.startswith("float32: no count up to 2 T4 fits") and "DDP keeps the whole model" in none
    served = GPUCount("L4", 22 * GiB, (Trial(1, None, 22 * GiB, "1 GPU", verdict=True,
                                             details={"kv_cache_tokens": 7488, "max_concurrency": 7.3125, "max_model_len": 1024}),))
    assert sentence("float16", served) == "float16: 1 × L4 (1 GPU): 7,488 tokens of KV cache per GPU (× 1), 7.31 requests of 1,024 tokens at once."


LLAMA = str(Path(__file__).resolve().parents[1] / "tests" / "hub_data" / "models" / "meta-llama" / "Llama-3.1-8B")


def test_serving_count_is_the_core_s_per_rank_plan_at_that_count() -> None:
    """Llama-3.1-8B served in float16 on T4s: vLLM does not start on one (its 16 GB of weights), it does on two (tensor
    parallel 2); each verdict is the core's own single estimate at that layout."""
    found = count_gpus(LLAMA, mode="serving", gpu="T4", dtypes=["float16"], max_model_len=4096)["float16"]
    one = estimate(LLAMA, mode="serving", gpu="T4", dtypes=["float16"], max_model_len=4096).rows[0].serving
    two = estimate(LLAMA, mode="serving", gpu="T4", dtypes=["float16"], max_model_len=4096, tensor_parallel_size=2).rows[0].serving
    assert one is not None and two is not None and one["fits"] is False and two["fits"] is True
    assert found.gpus == 2 and [t.gpus for t in found.trials] == [1, 2] and found.answer is not None
    assert found.answer.layout == "tensor parallel 2 x pipeline parallel 1"
    assert found.answer.details["kv_cache_tokens"] == two["kv_cache_tokens"] > 0
    assert serving_layout(8, 12) == (4, 2) and serving_layout(8, 32) == (8, 1) and serving_layout(16, 32) == (8, 2)


def test_a_count_that_cannot_be_asked_is_refused_in_one_line() -> None:
    with pytest.raises(BadOptionError, match="training, inference and serving"):
        count_gpus(LLAMA, mode="load", gpu="T4")
    with pytest.raises(BadOptionError, match="needs the kind of GPU"):
        count_gpus(LLAMA, mode="training")
    with pytest.raises(BadOptionError, match="what counting GPUs varies"):
        count_gpus(LLAMA, mode="training", gpu="T4", gpus=4)
    with pytest.raises(BadOptionError, match="training strategy"):
        count_gpus(LLAMA, mode="serving", gpu="T4", strategy="zero3")


def test_the_cli_s_count_gpus_flag(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from estimator.cli import main

    args = [LLAMA, "--mode", "serving", "--gpu", "T4", "--dtypes", "float16", "--max-model-len", "4096", "--count-gpus"]
    assert main([*args, "--format", "json"]) == 0
    counted = json.loads(capsys.readouterr().out)["gpu_count"]["float16"]
    assert counted["gpus"] == 2 and [t["gpus"] for t in counted["trials"]] == [1, 2] and counted["trials"][1]["fits"] is True
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "How many GPUs:\n- float16: 2 × T4 (tensor parallel 2 x pipeline parallel 1): " in out and "; 1 does not fit (" in out
    assert main([*args, "--format", "csv"]) == 2 and "--count-gpus answers in table, json or markdown" in capsys.readouterr().err
