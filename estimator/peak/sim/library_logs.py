"""Library log records that would keep a simulation's fake tensors alive, rendered to text as they are made.

bitsandbytes' CPU backend, on CPUs with AVX512-BF16, logs at import the exception of a failed optional kernel load
(``logger.warning("Failed to load CPU gemm_4bit_forward ...: %s", exc)``): the record's argument is the exception, whose
traceback holds the importing frames and, through ``f_back``, every frame up the stack. Where a handler keeps records
(pytest's log capture, a notebook's or a server's log buffer) and the import happens inside a simulation, those frames
keep fake tensors alive and the simulated peak grows (a 4-bit Llama's generate, testkit.quant_truth llama_gqa: 586,816
B instead of 504,896 B). :func:`install` gives such loggers a filter that renders the message (and any exception's
traceback) to text and drops the objects, so no record holds a frame; what a handler prints is unchanged.
"""

from __future__ import annotations

import logging

__all__ = ["LOGGERS", "install"]

# the loggers whose records carry exceptions raised inside the libraries' imports or calls made during a simulation
# (estimator.peak.sim.quantized re-runs that module's source as ``..._recorded`` with its warnings quieted: no record)
LOGGERS = ("bitsandbytes.backends.cpu.ops",)


class _Rendered(logging.Filter):
    """Renders a record's message and exception to text and drops the objects they came from."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.args:
            record.msg, record.args = record.getMessage(), None
        if record.exc_info:
            record.exc_text = record.exc_text or logging.Formatter().formatException(record.exc_info)
            record.exc_info = None
        return True


_FILTER = _Rendered()


def install() -> None:
    """Add the filter to each of :data:`LOGGERS` (once; idempotent; the libraries need not be imported)."""
    for name in LOGGERS:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
