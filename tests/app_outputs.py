"""Reading the page handlers' outputs in unit tests: the one message a refused request shows."""

from __future__ import annotations

import html
import re
from typing import Any

import estimator_app.handlers as handlers


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
