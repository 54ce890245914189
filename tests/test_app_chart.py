"""The chart: what is stacked adds up to the row's own figures, and the legend is this result's only."""

from __future__ import annotations

import re
from html.parser import HTMLParser

from estimator.result import Estimate, Row
from estimator.units import format_bytes
from estimator_app.chart import ADAM_EXTRA, LABELS, bars, chart_html, chart_title

GiB = 1024**3


class Drawn(HTMLParser):
    """What a browser would show: legend items, bars (label, total), segments per bar, focusable bars."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.legend: list[str] = []
        self.bars: list[tuple[str, str, str]] = []
        self.segments: dict[str, list[tuple[str, str]]] = {}
        self._in_legend = False
        self._text: list[str] = []
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "li" and "data-part" in a:
            self._in_legend, self._text = True, []
        if tag == "li" and "data-bar" in a:
            self.bars.append((a["data-bar"] or "", a["data-total"] or "", a.get("tabindex") or ""))
            self.segments[a["data-bar"] or ""] = []
        if tag == "span" and a.get("class") == "mme-seg":
            self.segments[self.bars[-1][0]].append((a["data-part"] or "", a["data-value"] or ""))

    def handle_endtag(self, tag: str) -> None:
        if tag == "li" and self._in_legend:
            self.legend.append("".join(self._text).strip())
            self._in_legend = False

    def handle_data(self, data: str) -> None:
        if self._in_legend:
            self._text.append(data)


def load_estimate() -> Estimate:
    rows = (
        Row(dtype="float32", total_bytes=4 * GiB, largest_layer_bytes=GiB, training_adam_bytes=16 * GiB, method="exact"),
        Row(dtype="int4", total_bytes=GiB // 2, largest_layer_bytes=None, training_adam_bytes=None, method="exact"),
        Row(dtype="int8", total_bytes=None, largest_layer_bytes=None, training_adam_bytes=None, method="exact"),
    )
    return Estimate(model="m", library="transformers", source="local", mode="load", rows=rows)


def peak_estimate() -> Estimate:
    row = Row(dtype="bfloat16", total_bytes=GiB, largest_layer_bytes=None, training_adam_bytes=None, method="simulated",
              peak_bytes=3 * GiB + 12345, components={"weights": GiB, "kv_cache": 12345, "activations": 2 * GiB, "gradients": 0})
    return Estimate(model="m", library="transformers", source="local", mode="inference", rows=(row,))


def test_load_rows_chart_weights_and_the_adam_breakdown() -> None:
    estimate = load_estimate()
    drawn = Drawn(chart_html(estimate))
    assert [(label, total) for label, total, _ in drawn.bars] == [
        ("float32 load", format_bytes(4 * GiB)), ("float32 train (Adam)", format_bytes(16 * GiB)), ("int4 load", format_bytes(GiB // 2))]
    assert drawn.segments["float32 train (Adam)"] == [("weights", format_bytes(4 * GiB)), (ADAM_EXTRA, format_bytes(12 * GiB))]
    assert drawn.legend == [LABELS["weights"], LABELS[ADAM_EXTRA]]
    assert all(tabindex == "0" for _, _, tabindex in drawn.bars)  # every bar is reached by the keyboard
    assert "Adam" in chart_title(estimate)


def test_peak_rows_chart_their_components_with_human_labels() -> None:
    estimate = peak_estimate()
    drawn = Drawn(chart_html(estimate))
    assert drawn.bars[0][:2] == ("bfloat16 inference peak", format_bytes(3 * GiB + 12345))
    assert sum(b.total for b in bars(estimate)) == estimate.rows[0].peak_bytes
    assert drawn.legend == ["Weights", "Activations", "KV cache"]  # present parts only, no zero part, no raw ids
    assert not any(re.search(r"_", label) for label in drawn.legend)
    assert chart_title(estimate) == "Memory at the inference peak, by component"


def test_the_legend_follows_each_result_only() -> None:
    # the page renders each answer from scratch: a peak result after a load result has no Adam entry
    assert Drawn(chart_html(load_estimate())).legend != Drawn(chart_html(peak_estimate())).legend
    assert LABELS[ADAM_EXTRA] not in Drawn(chart_html(peak_estimate())).legend


def test_the_text_alternative_is_a_table_with_the_same_numbers() -> None:
    html = chart_html(load_estimate())
    assert "<table>" in html and "The chart as a table" in html
    for value in (format_bytes(4 * GiB), format_bytes(12 * GiB), format_bytes(16 * GiB)):
        assert f"<td>{value}</td>" in html


def test_labels_are_escaped() -> None:
    row = Row(dtype="Q4_K_M<b>", total_bytes=GiB, largest_layer_bytes=None, training_adam_bytes=None, method="stored")
    html = chart_html(Estimate(model="m", library="gguf", source="local", mode="load", rows=(row,)))
    assert "<b>" not in html and "Q4_K_M&lt;b&gt;" in html


def test_empty_estimate_says_there_is_nothing_to_chart() -> None:
    assert "No figures" in chart_html(Estimate(model="m", library="t", source="local", mode="load", rows=()))


def test_a_row_without_a_peak_gets_no_bar_in_a_peak_chart() -> None:
    rows = (*peak_estimate().rows, Row(dtype="int4", total_bytes=GiB, largest_layer_bytes=None, training_adam_bytes=None, method="exact"))
    html = chart_html(Estimate(model="m", library="transformers", source="local", mode="inference", rows=rows))
    assert [label for label, _, _ in Drawn(html).bars] == ["bfloat16 inference peak"] and "No inference peak for int4" in html
