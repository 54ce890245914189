"""The one place that turns any exception into the line a user sees, and its exit status."""

from __future__ import annotations

from estimator.errors import EstimatorError


def user_message(exc: BaseException) -> tuple[str, int]:
    """``(message, exit_status)`` for ``exc``: our errors speak for themselves; anything else is a bug."""
    if isinstance(exc, EstimatorError):
        return exc.message, exc.exit_code
    if isinstance(exc, KeyboardInterrupt):
        return "Interrupted.", 130
    if isinstance(exc, MemoryError):
        return "Ran out of memory while estimating; try a smaller configuration.", 1
    return (
        (f"Internal error ({type(exc).__name__}); please report it with the command you ran, "
        "and run again with --debug for the traceback."),
        1,
    )
