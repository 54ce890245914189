"""Library log records never hold a simulation's frames (estimator.peak.sim.library_logs).

bitsandbytes' CPU backend logs the exception of a failed optional kernel load at import (on CPUs with AVX512-BF16); a
handler that keeps records (pytest's log capture, a server's log buffer) then kept the exception's traceback and, up
its frames, a simulation's fake tensors: a 4-bit Llama's simulated generate grew from 504,896 B to 586,816 B. Checked
here on any CPU: the filter renders records to text (a frame referenced by a kept record's exception is released), and
the re-run of bitsandbytes' CPU kernels' source (estimator.peak.sim.quantized._collected) logs nothing, its AVX512-BF16
branch forced.
"""

from __future__ import annotations

import gc
import logging
import weakref
from collections.abc import Iterator

import pytest

from estimator.peak.sim import library_logs


class _Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def kept() -> Iterator[_Kept]:
    handler = _Kept()
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield handler
    finally:
        root.removeHandler(handler)


class _Held:
    """Stands for a fake tensor held by a simulation's frame."""


def _log_a_failure(logger: logging.Logger) -> weakref.ref[_Held]:
    held = _Held()  # a local of a frame the exception's traceback reaches
    try:
        raise ModuleNotFoundError("No module named 'kernels'")
    except ModuleNotFoundError as exc:
        logger.warning("Failed to load CPU gemm_4bit_forward from kernels-community: %s.", exc)
        logger.warning("and with its traceback", exc_info=True)
    return weakref.ref(held)


def test_a_kept_record_of_a_library_s_exception_holds_no_frame(kept: _Kept) -> None:
    library_logs.install()
    logger = logging.getLogger(library_logs.LOGGERS[0])
    ref = _log_a_failure(logger)
    gc.collect()
    assert ref() is None  # the frame's local is gone: no record holds the exception or its traceback
    assert [r.getMessage() for r in kept.records[-2:]] == [
        "Failed to load CPU gemm_4bit_forward from kernels-community: No module named 'kernels'.", "and with its traceback"]
    assert "ModuleNotFoundError: No module named 'kernels'" in (kept.records[-1].exc_text or "")  # still printed
    other = logging.getLogger("tests.library_logs.other")  # a logger not listed keeps its records as they are
    ref = _log_a_failure(other)
    gc.collect()
    assert ref() is not None


def test_the_rerun_of_bitsandbytes_cpu_kernels_logs_nothing(kept: _Kept, monkeypatch: pytest.MonkeyPatch) -> None:
    import bitsandbytes.functional  # (its own import logs once, on such CPUs: not the re-run's record)

    from estimator.peak.sim.quantized import _collected

    monkeypatch.setattr(bitsandbytes.functional, "has_avx512bf16", lambda: True)  # the branch that logs, on any CPU
    found = _collected("bitsandbytes.backends.cpu.ops", "cpu")
    assert "bitsandbytes::gemv_4bit" in found  # the branch ran
    assert not [r for r in kept.records if r.name.endswith("_recorded")], [r.getMessage() for r in kept.records]
