"""Stage 7, fronts for a plain ``nn.Module``: ``estimate_module``, ``summarize``, ``MemTracker`` and the
drop-in shims of older tools (:mod:`estimator.modules.compat`). All peaks come from the one engine in
:mod:`estimator.peak.engine`."""
