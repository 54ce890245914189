"""The one place that turns any exception into the line a user sees, and its exit status.

Each adapter passes its :class:`Wording`: how it names an option to its user (the CLI's flags,
the page's form labels) and what to do after an internal error. :data:`CLI` is the default.
"""

from __future__ import annotations

from dataclasses import dataclass

from estimator.errors import EstimatorError, Option, OptionWording, flag


@dataclass(frozen=True)
class Wording:
    """How one adapter speaks to its user."""

    option: OptionWording
    internal_hint: str  # appended to an internal error: where the user can get the traceback


CLI = Wording(option=flag, internal_hint="please report it with the command you ran, and run again with --debug for the traceback")


def user_message(exc: BaseException, wording: Wording = CLI) -> tuple[str, int]:
    """``(message, exit_status)`` for ``exc``: our errors speak for themselves; anything else is a bug."""
    if isinstance(exc, EstimatorError):
        return exc.worded(wording.option), exc.exit_code
    if isinstance(exc, KeyboardInterrupt):
        return "Interrupted.", 130
    if isinstance(exc, MemoryError):
        return "Ran out of memory while estimating; try a smaller configuration.", 1
    return f"Internal error ({type(exc).__name__}); {wording.internal_hint}.", 1


__all__ = ["CLI", "Option", "Wording", "user_message"]
