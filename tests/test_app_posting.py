"""The discussion a result becomes: title, body with exact figures, and refusals (no network here)."""

from __future__ import annotations

import pytest

from estimator.result import Estimate, Row
from estimator_app import posting

ROWS = (
    Row(dtype="float32", total_bytes=497_759_232, largest_layer_bytes=154_389_504, training_adam_bytes=1_991_036_928, method="stored"),
    Row(dtype="int4", total_bytes=None, largest_layer_bytes=None, training_adam_bytes=None, method="exact", notes=("not estimated | yet",)),
)
HUB = Estimate(
    model="openai-community/gpt2",
    library="transformers",
    source="hub",
    mode="load",
    rows=ROWS,
    options={"library": "auto", "dtypes": ["float32", "int4"], "mode": "load"},
    revision="a" * 40,
    architecture="GPT2LMHeadModel",
)


def test_title_names_mode_and_dtypes_and_is_stable() -> None:
    assert posting.title(HUB) == f"Memory needed (load; float32, int4) [{posting.options_key(HUB)}], from the Model Memory Estimator"
    assert posting.title(HUB) == posting.title(Estimate(**HUB.__dict__))


@pytest.mark.parametrize("change", [{"batch_size": 64}, {"seq_len": 4096}, {"revision": "b" * 40}, {"optimizer": "sgd"}, {"lora_targets": "q"}])
def test_every_option_that_shaped_the_result_makes_another_discussion(change: dict[str, object]) -> None:
    # a batch-64 result must not land in the batch-1 discussion (nor another commit's, optimizer's, ...)
    base = Estimate(**{**HUB.__dict__, "options": {**HUB.options, "batch_size": 1, "seq_len": 2048, "optimizer": "adamw", "revision": "a" * 40}})
    other = Estimate(**{**base.__dict__, "options": {**base.options, **change}})
    assert posting.title(other) != posting.title(base)
    assert len(posting.title(other)) < 200


def test_body_has_exact_figures_options_method_and_the_public_link() -> None:
    text = posting.body(HUB, "model=openai-community/gpt2&dtypes=float32,int4", {"ESTIMATOR_APP_PUBLIC_URL": "https://x.hf.space"})
    assert "| float32 | 474.70 MiB (497,759,232 bytes) | 147.24 MiB (154,389,504 bytes) | 1.85 GiB (1,991,036,928 bytes) | stored |" in text
    assert "| int4 | — | — | — | not available |" in text  # no figure: not labelled "exact"
    assert "- Library: auto\n- dtypes: float32, int4\n- Mode: load" in text and "['" not in text
    assert "meta device" in text and "activations are not included" in text
    assert text.rstrip().endswith("[open this result in the Model Memory Estimator](https://x.hf.space/?model=openai-community/gpt2&dtypes=float32,int4)")
    assert f"commit `{'a' * 40}`" in text


def test_a_local_run_posts_no_loopback_link() -> None:
    text = posting.body(HUB, "model=openai-community/gpt2", {})
    assert "127.0.0.1" not in text and "http" not in text and "`?model=openai-community/gpt2`" in text
    assert posting.public_link("model=x", {"SPACE_HOST": "me-estimator.hf.space"}) == "https://me-estimator.hf.space/?model=x"


def test_only_hub_results_are_posted() -> None:
    local = Estimate(model="/tmp/x", library="transformers", source="local", mode="load", rows=ROWS)
    with pytest.raises(posting.PostingError, match="local folder"):
        posting.repo_id(local)
    assert posting.repo_id(HUB) == "openai-community/gpt2"


def test_posting_needs_the_visitor_s_token() -> None:
    with pytest.raises(posting.PostingError, match="write-discussions"):
        posting.post("openai-community/gpt2", "t", "b", token="")


def test_options_are_named_as_the_form_names_them() -> None:
    serving = Estimate(**{**HUB.__dict__, "mode": "serving", "options": {
        "mode": "serving", "gpu_memory": "24GiB", "max_model_len": 4096, "kv_cache_dtype": "fp8", "gpus": 1}})
    lines = posting.options_lines(serving)
    assert lines == ["- Mode: serving", "- GPU memory: 24GiB", "- Max model length: 4096", "- KV cache dtype: fp8", "- GPUs per node: 1"]
