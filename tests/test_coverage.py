"""A fixed sample of transformers' registry through the coverage bench's own code (testkit.coverage).

Each model type gets its main task class and a small config by the bench's shrinking rule, is built
for real on the CPU (saved and loaded back with ``from_pretrained``, storages counted), and is then
asked through ``estimate()`` on a folder holding only that config.json: the load row must equal the
real build's bytes, and inference and training must be simulated (not the formula fallback, not
null, no error). ``python -m bench.coverage`` runs the whole registry (docs/coverage.md).
"""

from __future__ import annotations

import pytest

from testkit.coverage import CATEGORIES, run_type

SAMPLE = {  # model type -> the category the bench puts it in (at least one per category but "other")
    "llama": "text decoder", "gpt2": "text decoder", "bart": "text decoder", "diffllama": "text decoder", "fsmt": "text decoder",
    "qwen2_5_vl": "VLM", "llava": "VLM", "gemma3": "VLM", "clip": "VLM",
    "audioflamingo3": "speech",
    "bert": "encoder", "roberta": "encoder", "flaubert": "encoder",
    "vit": "vision", "convnext": "vision",
    "mamba": "hybrid/SSM", "lfm2": "hybrid/SSM", "falcon_mamba": "hybrid/SSM",
    "mixtral": "MoE", "qwen2_moe": "MoE", "deepseek_v3": "MoE",
    "canine": "other",
}


def test_the_sample_covers_every_category() -> None:
    assert set(SAMPLE.values()) == set(CATEGORIES)


@pytest.mark.parametrize("model_type", sorted(SAMPLE))
def test_small_config_is_exact_and_simulated(model_type: str) -> None:
    row = run_type(model_type, seq_len=32)
    assert row["status"] == "done", row.get("skip_reason")
    assert row["category"] == SAMPLE[model_type]
    assert row["load"]["method"] == "exact" and row["load"]["bytes"] == row["truth_bytes"], row["load"]
    for mode in ("inference", "training"):
        entry = row[mode]
        assert entry["status"] == "ok" and entry["method"] == "simulated", (mode, entry)
        assert entry["bytes"] > row["truth_bytes"], (mode, entry)  # the weights are live at the peak, and more
