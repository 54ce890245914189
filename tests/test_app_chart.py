"""The chart's data: what is stacked adds up to the row's own figures."""

from __future__ import annotations

import pytest

from estimator.result import Estimate, Row
from estimator_app.chart import ADAM_EXTRA, chart_frame, chart_title

GiB = 1024**3


def test_load_rows_chart_weights_and_the_adam_breakdown() -> None:
    rows = (
        Row(dtype="float32", total_bytes=4 * GiB, largest_layer_bytes=GiB, training_adam_bytes=16 * GiB, method="exact"),
        Row(dtype="int4", total_bytes=GiB // 2, largest_layer_bytes=None, training_adam_bytes=None, method="exact"),
        Row(dtype="int8", total_bytes=None, largest_layer_bytes=None, training_adam_bytes=None, method="exact"),
    )
    frame = chart_frame(Estimate(model="m", library="transformers", source="local", mode="load", rows=rows))
    assert list(frame["bar"]) == ["float32 load", "float32 train", "float32 train", "int4 load"]
    sums = frame.groupby("bar")["GiB"].sum()
    assert sums["float32 load"] == 4
    assert sums["float32 train"] == 16
    assert frame[frame["part"] == ADAM_EXTRA]["GiB"].tolist() == [12]
    assert sums["int4 load"] == pytest.approx(0.5)
    assert "Adam training" in chart_title(Estimate(model="m", library="t", source="local", mode="load", rows=rows))


def test_peak_rows_chart_their_components() -> None:
    row = Row(
        dtype="bfloat16",
        total_bytes=GiB,
        largest_layer_bytes=None,
        training_adam_bytes=None,
        method="simulated",
        peak_bytes=3 * GiB,
        components={"weights": GiB, "activations": 2 * GiB},
    )
    estimate = Estimate(model="m", library="transformers", source="local", mode="inference", rows=(row,))
    frame = chart_frame(estimate)
    assert frame.to_dict("records") == [
        {"bar": "bfloat16", "part": "weights", "GiB": 1.0},
        {"bar": "bfloat16", "part": "activations", "GiB": 2.0},
    ]
    assert chart_title(estimate) == "Memory at the inference peak, by component (GiB)"


def test_empty_estimate_gives_an_empty_frame_with_the_columns() -> None:
    frame = chart_frame(Estimate(model="m", library="t", source="local", mode="load", rows=()))
    assert list(frame.columns) == ["bar", "part", "GiB"] and frame.empty
