"""The stacked bar chart, as HTML built from one result only: one bar per dtype (and per load/train view).

What exists is charted, and the title says which it is:

- rows with ``components`` (inference/training peaks): the components at the peak instant (a row
  with no peak gets no bar, and a line naming it);
- otherwise (load mode): a "load" bar of weights (``total_bytes``) and, where the row can be
  trained, a "train" bar stacking the weights and what ``training_adam_bytes`` adds on top
  (gradients, AdamW moments and, for 16-bit rows, fp32 master weights; no activations).

The chart is plain HTML (no plotting library keeps state between answers, so the legend and the
bars always follow the result on screen). Values are rounded as the table rounds them
(:func:`estimator.units.format_bytes`); a bar's total is the table's figure for that row. Each bar
is focusable and reads its parts aloud; the same numbers are in a table below the chart (the
chart's text alternative). Exact bytes are in the CSV/JSON downloads.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape
from typing import TYPE_CHECKING

from estimator.options import Component
from estimator.units import format_bytes

if TYPE_CHECKING:
    from estimator.result import Estimate

ADAM_EXTRA = "adam_extra"  # the load-mode "train" bar's part on top of the weights
LABELS: dict[str, str] = {
    Component.WEIGHTS.value: "Weights",
    ADAM_EXTRA: "Gradients + AdamW states (+ fp32 master weights)",
    Component.GRADIENTS.value: "Gradients",
    Component.OPTIMIZER_STATES.value: "Optimizer states",
    Component.ACTIVATIONS.value: "Activations",
    Component.ENCODER_ACTIVATIONS.value: "Image / audio encoder activations",
    Component.TEMPORARIES.value: "Temporaries",
    Component.KV_CACHE.value: "KV cache",
    Component.CONV_STATE.value: "Conv state (SSM layers)",
    Component.SSM_STATE.value: "SSM / recurrent state",
    Component.INPUTS.value: "Inputs",
}
# Colours at least 3:1 against white (WCAG 1.4.11, graphics) and told apart in the legend by name too.
COLORS: dict[str, str] = {
    Component.WEIGHTS.value: "#1d4ed8",
    ADAM_EXTRA: "#c2410c",
    Component.GRADIENTS.value: "#c2410c",
    Component.OPTIMIZER_STATES.value: "#7e22ce",
    Component.ACTIVATIONS.value: "#15803d",
    Component.ENCODER_ACTIVATIONS.value: "#4d7c0f",
    Component.TEMPORARIES.value: "#475569",
    Component.KV_CACHE.value: "#a16207",
    Component.CONV_STATE.value: "#9d174d",
    Component.SSM_STATE.value: "#be123c",
    Component.INPUTS.value: "#0e7490",
}
ORDER: tuple[str, ...] = tuple(LABELS)  # stacking and legend order


@dataclass(frozen=True)
class Bar:
    """One bar: its label, and its parts (part id, bytes) in stacking order."""

    label: str
    parts: tuple[tuple[str, int], ...]

    @property
    def total(self) -> int:
        return sum(value for _, value in self.parts)


def bars(estimate: Estimate) -> list[Bar]:
    """The bars of ``estimate``, in its row order."""
    made: list[Bar] = []
    for row in estimate.rows:
        dtype = str(row.dtype)
        if row.components:
            parts = sorted(row.components.items(), key=lambda item: ORDER.index(item[0]) if item[0] in ORDER else len(ORDER))
            made.append(Bar(f"{dtype} {estimate.mode.value} peak", tuple((k, v) for k, v in parts if v)))
            continue
        if estimate.mode.value != "load":
            continue  # no peak for this row (its notes say why): a load bar would not be the same kind of figure
        if row.total_bytes is not None:
            made.append(Bar(f"{dtype} load", ((Component.WEIGHTS.value, row.total_bytes),)))
            if row.training_adam_bytes is not None:
                made.append(Bar(f"{dtype} train (Adam)", ((Component.WEIGHTS.value, row.total_bytes),
                                                         (ADAM_EXTRA, row.training_adam_bytes - row.total_bytes))))
    return made


def chart_title(estimate: Estimate) -> str:
    if estimate.mode.value != "load":
        return f"Memory at the {estimate.mode.value} peak, by component"
    return "Load, and training with AdamW without activations"


def _label(part: str) -> str:
    return LABELS.get(part, part.replace("_", " ").capitalize())


def chart_html(estimate: Estimate) -> str:
    """The chart for ``estimate``: title, legend, one focusable bar per entry, and the same figures as a table."""
    shown = bars(estimate)
    title = escape(chart_title(estimate))
    if not shown:
        return f'<figure class="mme-chart"><figcaption>{title}</figcaption><p>No figures to chart for this result; the notes below say why.</p></figure>'
    used = [part for part in ORDER if any(part == p for bar in shown for p, _ in bar.parts)]
    used += list(dict.fromkeys(p for bar in shown for p, _ in bar.parts if p not in used))
    largest = max(bar.total for bar in shown) or 1
    legend = "".join(
        f'<li data-part="{escape(part)}"><span class="mme-swatch" style="background:{COLORS.get(part, "#334155")}"></span>'
        f"{escape(_label(part))}</li>"
        for part in used
    )
    rows = []
    for bar in shown:
        total = format_bytes(bar.total)
        spoken = "; ".join(f"{_label(p)} {format_bytes(v)}" for p, v in bar.parts)
        segments = "".join(
            f'<span class="mme-seg" data-part="{escape(p)}" data-value="{escape(format_bytes(v))}" '
            f'title="{escape(_label(p))}: {escape(format_bytes(v))}" '
            f'style="width:{100 * v / largest:.3f}%;background:{COLORS.get(p, "#334155")}"></span>'
            for p, v in bar.parts
        )
        tip = " · ".join(f"{escape(_label(p))} {escape(format_bytes(v))}" for p, v in bar.parts)
        rows.append(
            f'<li class="mme-bar" tabindex="0" data-bar="{escape(bar.label)}" data-total="{escape(total)}" '
            f'aria-label="{escape(bar.label)}: {escape(total)} in all ({escape(spoken)})">'
            f'<span class="mme-bar-label" aria-hidden="true">{escape(bar.label)}</span>'
            f'<span class="mme-track" aria-hidden="true">{segments}</span>'
            f'<span class="mme-bar-total" aria-hidden="true">{escape(total)}</span>'
            f'<span class="mme-tip" aria-hidden="true">{tip}</span></li>'
        )
    head = "".join(f"<th scope=\"col\">{escape(_label(p))}</th>" for p in used)
    body = []
    for bar in shown:
        values = dict(bar.parts)
        cells = "".join(f"<td>{escape(format_bytes(values[p])) if p in values else '—'}</td>" for p in used)
        body.append(f'<tr><th scope="row">{escape(bar.label)}</th>{cells}<td>{escape(format_bytes(bar.total))}</td></tr>')
    table = (
        '<details class="mme-chart-data"><summary>The chart as a table</summary><div class="mme-scroll" tabindex="0" role="region" '
        f'aria-label="The chart as a table"><table><thead><tr><th scope="col">Bar</th>{head}<th scope="col">Total</th></tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div></details>"
    )
    missing = [str(row.dtype) for row in estimate.rows if estimate.mode.value != "load" and not row.components]
    gap = f'<p class="mme-note">No {escape(estimate.mode.value)} peak for {escape(", ".join(missing))}; the notes below say why.</p>' if missing else ""
    return (
        f'<figure class="mme-chart" aria-label="{title}"><figcaption>{title}</figcaption>'
        f'<ul class="mme-legend" aria-label="Legend">{legend}</ul>'
        f'<ul class="mme-bars" aria-label="Bars (focus one to hear its parts)">{"".join(rows)}</ul>{gap}{table}</figure>'
    )
