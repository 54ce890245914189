"""The public contract (docs/CONTRACT.md, a copy of ../shared/CONTRACT.md plus additions) and the code agree."""

from __future__ import annotations

import re
from pathlib import Path

import estimator
from estimator.cli import build_parser
from estimator.options import Component, Device, DType, Library, Mode, Optimizer, OutputFormat

CONTRACT = (Path(__file__).resolve().parent.parent / "docs" / "CONTRACT.md").read_text()


def test_every_contract_option_is_a_cli_option() -> None:
    first_cells = [line.split("|")[1] for line in CONTRACT.splitlines() if line.startswith("| `--")]
    flags = {flag for cell in first_cells for flag in re.findall(r"`(--[a-z0-9_-]+)`", cell)}
    known = {opt for action in build_parser()._actions for opt in action.option_strings}
    assert len(flags) >= 22
    assert flags <= known, flags - known


def test_vocabularies_match() -> None:
    assert [d.value for d in DType] == ["float32", "float16", "bfloat16", "float8", "int8", "int4"]
    assert [m.value for m in Mode] == ["load", "inference", "training", "serving"]
    assert [d.value for d in Device] == ["cuda", "cpu"]
    assert [o.value for o in Optimizer] == ["adamw", "sgd", "adafactor", "adamw8bit"]
    assert [f.value for f in OutputFormat] == ["table", "json", "csv", "markdown"]
    assert [lib.value for lib in Library] == ["auto", "transformers", "timm", "diffusers", "sentence-transformers"]
    for component in Component:
        assert component.value in CONTRACT


def test_row_fields_are_the_contracts() -> None:
    block = CONTRACT.split('"rows": [', 1)[1].split("]\n}", 1)[0]
    fields = set(re.findall(r'^\s+"([a-z_]+)":', block, flags=re.M))
    row = estimator.Row(dtype="float32", total_bytes=1, largest_layer_bytes=1, training_adam_bytes=1, method="exact")
    assert set(row.to_dict()) == fields


def test_public_api_is_pinned() -> None:
    assert "estimate" in estimator.__all__ and "Estimate" in estimator.__all__
    for name in estimator.__all__:
        assert hasattr(estimator, name), name
