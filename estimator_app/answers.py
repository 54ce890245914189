"""One request's answer: the estimate (through the lanes) and every rendering of it, cached.

The core is called as the hosted page must call it: with a Hub reference parsed by
:func:`estimator_app.form.hub_reference` (never the visitor's text, so the core never looks at the
server's disk), the visitor's token or none (never the server's), never ``trust_remote_code``, and
with ``cross_check`` on. Renderings are plain values (tables, chart data, download paths; Gradio
copies what it sends) kept per result digest, and the downloads are written once per distinct
result under ``$TMPDIR/estimator_app/<digest>/``.

Access: every cache here sits behind the core's. A rendering or a download is reached only
through an :class:`Estimate` that :func:`answer` just returned, and :func:`answer` calls the core
on every request, cached or not; the core serves a gated or private repo's answer only to a caller
its access check has just let through (see :func:`estimator.estimate`). No key holds a token.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from estimator import estimate
from estimator.cache import LRUCache
from estimator.fit import table as fits_on
from estimator_app import chart, form, tables
from estimator_app.lanes import lanes

if TYPE_CHECKING:
    from estimator.result import Estimate

DOWNLOADS = Path(tempfile.gettempdir()) / "estimator_app"


@dataclass(frozen=True)
class Rendered:
    """Everything the page shows for one result and one chosen GPU."""

    summary: str  # HTML
    table: str  # HTML
    csv_path: str
    json_path: str
    chart: str  # HTML
    fits: str  # HTML
    method: str  # Markdown


_RENDERED: LRUCache[Rendered] = LRUCache(256)


def request_key(state: form.FormState) -> tuple[Any, ...]:
    """What makes two requests the same question (never a token)."""
    return (state.model, state.revision, tuple(sorted((k, str(v)) for k, v in state.estimate_kwargs().items())))


def answer(state: form.FormState, token: str | None, *, admitted: Callable[[], None] = lambda: None) -> Estimate:
    """Estimate ``state`` with the visitor's ``token``, in the builder lane unless asked before."""

    kwargs = state.estimate_kwargs()
    ref = form.hub_reference(state.model, kwargs["revision"])

    def work() -> Estimate:
        return estimate(ref, **kwargs, token=token or None, trust_remote_code=False, cross_check=True)

    return lanes().run(request_key(state), work, admitted=admitted)


def rendered(result: Estimate, gpu: str | None, device: str = "cuda") -> Rendered:
    """Every rendering of ``result``, with ``gpu`` first in the fits-on table (none for ``device`` cpu); kept for repeats.

    Only ever called with a result :func:`answer` returned to this caller: the key is the result
    itself, so a caller who was refused it cannot name it.
    """
    key = (tables.result_key(result), gpu, device)
    cached = _RENDERED.get(key)
    if cached is not None:
        return cached
    DOWNLOADS.mkdir(parents=True, exist_ok=True)
    n = tables.per_gpu_count(result)
    caption = fits_on.fits_caption(result.mode, fits_on.allocator_counted(result), gpu_chosen=bool(gpu or result.options.get("gpu_memory")))
    if n > 1:
        caption = f"Each verdict is for one GPU of {n}: the figures are per GPU (× {n}). " + caption
    csv_path, json_path = tables.write_downloads(result, DOWNLOADS / key[0])
    made = Rendered(
        summary=tables.summary_html(result),
        table=tables.results_html(result),
        csv_path=str(csv_path),
        json_path=str(json_path),
        chart=chart.chart_html(result),
        fits=(tables.serving_html(result) if result.mode.value == "serving"
              else tables.fits_html(result, fits_on.fits_frame(result, gpu), caption, device)),
        method=tables.method_note(result),
    )
    _RENDERED.put(key, made)
    return made


def pinned(state: form.FormState, revision: str | None) -> form.FormState:
    """The link pins the commit that was estimated, so it reproduces this very result."""
    return replace(state, revision=revision) if revision and len(revision) == 40 else state
