"""The publisher's own byte count: a sharded checkpoint's index states ``metadata.total_size``.

For every published config in the fixtures that ships a ``model.safetensors.index.json``, the
bfloat16 Total Size of the meta build equals that count within 0.01% (the build also holds
non-persistent buffers such as rotary ``inv_freq`` that a checkpoint does not store).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from estimator import estimate

MODELS = Path(__file__).parent / "hub_data" / "models"
INDEXED = sorted(p.parent for p in MODELS.glob("*/*/model.safetensors.index.json"))


def test_the_big_ones_are_there() -> None:
    names = {f"{p.parent.name}/{p.name}" for p in INDEXED}
    assert {"bigscience/bloom", "mistralai/Mixtral-8x7B-v0.1", "meta-llama/Llama-3.1-8B"} <= names


@pytest.mark.parametrize("folder", INDEXED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_bfloat16_total_matches_index_total_size(folder: Path) -> None:
    total_size = json.loads((folder / "model.safetensors.index.json").read_text())["metadata"]["total_size"]
    row = estimate(str(folder), dtypes=["bfloat16"]).row("bfloat16")
    assert row.total_bytes is not None
    assert abs(row.total_bytes - total_size) / total_size < 1e-4, (row.total_bytes, total_size)
