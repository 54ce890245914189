"""The page handlers in unit tests: the form's default values, a stand-in request, and the one message a refused request shows."""

from __future__ import annotations

import html
import re
from typing import Any

import estimator_app.handlers as handlers

# The handler tests' baseline form: every value after the model field, in link order (estimator_app/fields.FIELDS); load in float32 and float16.
DEFAULTS = ("main", "auto", ["float32", "float16"], "load", 1, 0, 0, 0, "cuda", "adamw", False, False, 0, "", "none", "", 0, "f16", "auto", "", 0.9, 0, 0, 0, "auto", 16, 1, 1, "none", "none", 1, 1, "none", "0.19", 0, 0, 0, "auto")


class FakeRequest:
    def __init__(self, query: dict[str, str]) -> None:
        self.query_params = query


def no_progress(*args: Any, **kwargs: Any) -> None:
    return None


def refusal(outputs: Any) -> tuple[str, str]:
    """``(title, message)`` of the error box in a handler's outputs (the estimate's ``status``, or a post's status).

    Fails the test if the outputs hold no error box.
    """
    values = outputs if isinstance(outputs, tuple) else (outputs,)
    if len(values) == handlers.N_OUTPUTS:
        values = (values[handlers.OUTPUTS.index("status")],)
    for value in values:
        if isinstance(value, str) and 'class="mme-error"' in value:
            found = re.search(r"<strong>(.*?)\.</strong> (.*)</div>$", value, re.S)
            assert found, value
            return html.unescape(found.group(1)), html.unescape(found.group(2))
    raise AssertionError(f"no error shown in {values!r}")
