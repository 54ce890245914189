"""The results table, the method note and the downloads, against a real build of a local config."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from estimator import estimate
from estimator.units import format_bytes
from estimator_app.tables import TRAINING_LABEL, method_note, results_frame, summary_html, write_downloads

FIXTURES = Path(__file__).resolve().parent / "hub_data" / "models"  # the repo's copies of the published configs
GPT2 = FIXTURES / "openai-community" / "gpt2"


@pytest.fixture(scope="module")
def gpt2():
    if not (GPT2 / "config.json").exists():
        pytest.skip("hub fixtures not available")
    return estimate(str(GPT2), dtypes=["float32", "bfloat16", "int4"])


def test_table_shows_the_core_s_bytes_in_binary_units(gpt2) -> None:
    frame = results_frame(gpt2)
    assert list(frame.columns) == ["dtype", "Total size", "Largest layer", TRAINING_LABEL, "method"]
    for (_, line), row in zip(frame.iterrows(), gpt2.rows, strict=True):
        assert line["dtype"] == row.dtype
        assert line["Total size"] == format_bytes(row.total_bytes)
        assert line["Largest layer"] == format_bytes(row.largest_layer_bytes)
        assert line[TRAINING_LABEL] == format_bytes(row.training_adam_bytes)


def test_gpt2_float32_is_its_parameter_count_times_four(gpt2) -> None:
    # independent truth: GPT-2 small has 124,439,808 parameters (tied lm_head); the core counts buffers on top
    assert gpt2.row("float32").total_bytes >= 124_439_808 * 4


def test_downloads_carry_exact_integers(gpt2, tmp_path: Path) -> None:
    csv_path, json_path = write_downloads(gpt2, tmp_path)
    data = json.loads(json_path.read_text())
    assert data == gpt2.to_dict()
    with csv_path.open() as handle:
        lines = list(csv.DictReader(handle))
    assert [int(line["total_bytes"]) for line in lines if line["total_bytes"]] == [
        r.total_bytes for r in gpt2.rows if r.total_bytes is not None
    ]
    assert csv_path.name == "gpt2-memory.csv"


def test_method_note_and_summary(gpt2) -> None:
    note = method_note(gpt2)
    assert "*exact*" in note and "1024³" in note and "activations are not included" in note
    assert f"<strong>{gpt2.model}</strong>" in summary_html(gpt2) and "gpt2" in gpt2.model
