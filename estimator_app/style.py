"""The page's CSS and the one script its HTML outputs run (the scroll cue); no Gradio import.

Text colours keep at least 4.5:1 against their background (WCAG AA) in light and dark themes;
at phone width (≤ 640 px) the "fits on" table becomes one card per GPU with its verdicts first,
and a table wider than the screen scrolls inside its own box with a visible cue (a shadow at the
edge, and "Scroll sideways for more columns →" while there is more).
"""

from __future__ import annotations

SCROLL_CUE_JS = """
const mark = () => element.querySelectorAll('.mme-table').forEach((t) => {
  const s = t.querySelector('.mme-scroll');
  t.classList.toggle('mme-more', !!s && s.scrollWidth > s.clientWidth + 1);
});
new MutationObserver(() => requestAnimationFrame(mark)).observe(element, { childList: true, subtree: true });
if (typeof ResizeObserver !== 'undefined') { new ResizeObserver(mark).observe(element); }
requestAnimationFrame(mark);
"""

CSS = """
#notices { border-left: 4px solid #b45309; padding-left: .75rem; }
.example-row button { flex: 0 1 auto !important; min-width: 0 !important; }
/* Gradio prefixes each selector of this CSS with its container; a ".dark" rule must have one selector
   (in a comma list it lands in the wrong place). */
/* Gradio's hint text under a field: darker than its default grey, for 4.5:1 */
.info-text { color: #4b5563 !important; }
.dark .info-text { color: #d1d5db !important; }
footer .show-api, footer .built-with, footer .settings { color: #4b5563 !important; opacity: 1 !important; }
.dark footer .show-api { color: #d1d5db !important; }
.dark footer .built-with { color: #d1d5db !important; }
.dark footer .settings { color: #d1d5db !important; }
.dark .prose a { color: #93c5fd !important; }
/* the primary buttons: white on Gradio's orange is 2.8:1; this orange is 5.2:1 */
.gradio-container { --button-primary-background-fill: #c2410c; --button-primary-background-fill-hover: #9a3412;
  --button-primary-text-color: #ffffff; --button-primary-text-color-hover: #ffffff; --button-primary-border-color: #c2410c; }

.mme-error { border-left: 4px solid #b91c1c; background: #fef2f2; color: #7f1d1d; padding: .6rem .8rem; border-radius: 4px;
  overflow-wrap: anywhere; word-break: break-word; max-width: 100%; }
.mme-setting { margin: 0 0 .2rem; font-weight: 600; font-size: 1.05rem; overflow-wrap: anywhere; }
.mme-count { border-left: 4px solid #1d4ed8; padding: .3rem .8rem; overflow-wrap: anywhere; }
.mme-count ul { margin: .2rem 0 0 1.1rem; padding: 0; }
.mme-examples-label { font-size: .9rem; font-weight: 600; white-space: nowrap; }
#examples { align-items: center; flex-wrap: wrap; gap: .35rem; justify-content: flex-start !important; }
#examples-label-box { flex: 0 0 auto !important; min-width: 0 !important; width: auto !important; }
#mode label { flex: 0 1 auto; }
#share-link input, #share-link textarea { white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
.fits-source { font-size: .9rem; margin: .2rem 0 .4rem; overflow-wrap: anywhere; }
.mme-summary { margin: 0; }
.mme-warning { border-left: 4px solid #b45309; background: #fffbeb; color: #78350f; padding: .4rem .8rem; margin-top: .4rem; border-radius: 4px; }
.mme-warning ul { margin: .2rem 0 0 1.1rem; padding: 0; }
.mme-stale { display: inline-block; background: #fef3c7; color: #78350f; border: 1px solid #b45309; border-radius: 4px;
  padding: 0 .4rem; font-size: .85em; font-weight: 600; }
.mme-summary-stale { opacity: 1; }
.mme-note { font-size: .9rem; margin: .4rem 0 0; }

.mme-table { margin: .25rem 0 .5rem; }
.mme-table table { width: 100%; border-collapse: collapse; font-size: .95rem; }
.mme-title { font-weight: 600; font-size: 1.05rem; margin: .25rem 0; }
.mme-sr { position: absolute !important; width: 1px; height: 1px; overflow: hidden; clip: rect(0 0 0 0); white-space: nowrap; }
.mme-table th, .mme-table td { text-align: left; padding: .35rem .5rem; border-bottom: 1px solid #d1d5db; vertical-align: top;
  background: transparent; }
.mme-table td { white-space: nowrap; }
.mme-table td.mme-verdict { white-space: normal; }
.mme-table thead th { font-weight: 600; border-bottom: 2px solid #6b7280; }
.mme-scroll { overflow-x: auto; max-width: 100%;
  background: linear-gradient(to right, var(--background-fill-primary, #fff) 30%, transparent) left / 2.5rem 100% no-repeat local,
              linear-gradient(to left, var(--background-fill-primary, #fff) 30%, transparent) right / 2.5rem 100% no-repeat local,
              radial-gradient(farthest-side at 0 50%, rgba(0,0,0,.3), transparent) left / .9rem 100% no-repeat scroll,
              radial-gradient(farthest-side at 100% 50%, rgba(0,0,0,.3), transparent) right / .9rem 100% no-repeat scroll; }
.mme-scroll:focus-visible, .mme-bar:focus-visible { outline: 3px solid #2563eb; outline-offset: 2px; }
.mme-cue { display: none; margin: 0 0 .25rem; font-size: .85rem; font-weight: 600; color: #1e3a8a; }
.dark .mme-cue { color: #bfdbfe; }
.mme-table.mme-more .mme-cue { display: block; }
.mme-verdict.mme-yes { color: #166534; font-weight: 600; }
.mme-verdict.mme-no { color: #991b1b; font-weight: 600; }
.dark .mme-verdict.mme-yes { color: #86efac; }
.dark .mme-verdict.mme-no { color: #fca5a5; }
.mme-verdict.mme-partial { color: #92400e; font-weight: 600; }
.dark .mme-verdict.mme-partial { color: #fcd34d; }

@media (max-width: 640px) {
  .mme-cards table, .mme-cards tbody { display: block; width: 100%; }
  .mme-cards thead { position: absolute; width: 1px; height: 1px; overflow: hidden; clip: rect(0 0 0 0); white-space: nowrap; }
  .mme-cards table { border: 0 !important; }
  .mme-cards tr { display: flex; flex-direction: column; border: 1px solid #9ca3af; border-radius: 6px; padding: .4rem .6rem; margin: 0 0 .5rem; }
  .mme-cards th, .mme-cards td { display: block; border: 0; padding: .1rem 0; }
  .mme-cards th[scope=row] { order: 0; font-size: 1.05rem; }
  .mme-cards td.mme-verdict { order: 1; }
  .mme-cards td:not(.mme-verdict) { order: 2; font-size: .875rem; }
  .mme-cards td::before { content: attr(data-label) ": "; font-weight: 600; color: inherit; }
}

.mme-chart { margin: .5rem 0; }
.mme-chart figcaption { font-weight: 600; font-size: 1.05rem; margin-bottom: .25rem; }
.mme-legend { list-style: none; display: flex; flex-wrap: wrap; gap: .25rem 1rem; padding: 0; margin: 0 0 .5rem; font-size: .9rem; }
.mme-legend li { display: flex; align-items: center; gap: .35rem; }
.mme-swatch { display: inline-block; width: .9rem; height: .9rem; border-radius: 2px; border: 1px solid rgba(0,0,0,.35); }
.mme-bars { list-style: none; padding: 0; margin: 0; }
.mme-bar { display: grid; grid-template-columns: minmax(7rem, 11rem) 1fr auto; gap: .5rem; align-items: center; padding: .2rem .25rem;
  border-radius: 4px; position: relative; }
.mme-bar:hover, .mme-bar:focus { background: rgba(37, 99, 235, .08); }
.mme-bar-label { font-size: .9rem; overflow-wrap: anywhere; }
.mme-bar-total { font-size: .9rem; font-weight: 600; white-space: nowrap; }
.mme-track { display: flex; height: 1.4rem; min-width: 0; }
.mme-seg { display: block; height: 100%; min-width: 1px; }
.mme-tip { display: none; grid-column: 1 / -1; font-size: .85rem; padding: .15rem .25rem; }
.mme-bar:hover .mme-tip, .mme-bar:focus .mme-tip { display: block; }
.mme-chart-data { margin-top: .5rem; }
.mme-chart-data summary { cursor: pointer; font-size: .9rem; }
.mme-chart-data table { border-collapse: collapse; font-size: .9rem; }
.mme-chart-data th, .mme-chart-data td { padding: .2rem .5rem; border-bottom: 1px solid #d1d5db; text-align: left; }
@media (max-width: 640px) {
  .mme-bar { grid-template-columns: 1fr auto; }
  .mme-bar-label { grid-column: 1 / 2; }
  .mme-bar-total { grid-column: 2 / 3; grid-row: 1; }
  .mme-track { grid-column: 1 / -1; }
}
"""
