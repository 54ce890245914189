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
    assert posting.title(HUB) == "Memory needed (load; float32, int4), from the Model Memory Estimator"
    assert posting.title(HUB) == posting.title(Estimate(**HUB.__dict__))


def test_body_has_exact_figures_options_method_and_link() -> None:
    text = posting.body(HUB, "https://x.hf.space/?model=openai-community/gpt2")
    assert "| float32 | 474.70 MiB (497,759,232 bytes) | 147.24 MiB (154,389,504 bytes) | 1.85 GiB (1,991,036,928 bytes) | stored |" in text
    assert "| int4 | — | — | — | exact |" in text
    assert "Options: library=auto, dtypes=['float32', 'int4'], mode=load." in text
    assert "meta device" in text and "activations are not included" in text
    assert text.rstrip().endswith("Reproduce it: https://x.hf.space/?model=openai-community/gpt2")
    assert f"commit `{'a' * 40}`" in text


def test_only_hub_results_are_posted() -> None:
    local = Estimate(model="/tmp/x", library="transformers", source="local", mode="load", rows=ROWS)
    with pytest.raises(posting.PostingError, match="local folder"):
        posting.repo_id(local)
    assert posting.repo_id(HUB) == "openai-community/gpt2"


def test_posting_needs_the_visitor_s_token() -> None:
    with pytest.raises(posting.PostingError, match="write-discussions"):
        posting.post("openai-community/gpt2", "t", "b", token="")
