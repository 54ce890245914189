"""How the page words the core's errors for its visitors (:class:`estimator.messages.Wording`).

An option named in an error is the form field that sets it, by its label ("Sequence length"), not
the CLI's flag; the page never runs a repo's code, so ``trust_remote_code`` is said to be the
command line's; an internal error asks for a report with this form's share-link query, never for
``--debug``. No page wording contains ``--``.
"""

from __future__ import annotations

from estimator.errors import GatedModelError, ModelNotFoundError, Option
from estimator.messages import Wording, user_message
from estimator.source import hub
from estimator_app.fields import OPTIONS, short_label

REMOTE_CODE = "trust-remote-code (a command-line flag; this page never runs a repo's code)"
REPORT = "please report it with this form's share link"


def page_option(option: Option) -> str:
    """``seq_len`` -> ``“Sequence length”``; an option the page has no field for is named as the command line's."""
    if option.name == "trust_remote_code":
        return REMOTE_CODE
    if option.name == "token":
        return "“Hub token” under Advanced"
    field = OPTIONS.get(option.name)
    if field is None:
        return f"{option.name.replace('_', '-')} (a command-line option; not on this page)"
    return f"“{short_label(field)}”"


PAGE = Wording(option=page_option, internal_hint=REPORT)


def for_form(query: str) -> Wording:
    """The page's wording for one request: an internal error names the query that reproduces it."""
    return Wording(option=page_option, internal_hint=f"{REPORT} (this page's address followed by ?{query})" if query else REPORT)


def page_message(exc: BaseException, wording: Wording = PAGE) -> tuple[str, int]:
    """``(message, status)`` for the page: the core's message in the page's words.

    Where the core's message tells a command-line user how to pass a token (``HF_TOKEN``, ``hf auth
    login``), the page says it from the error's structured fields instead: the token goes in its own
    “Hub token” field.
    """
    if isinstance(exc, GatedModelError) and exc.option == "token" and exc.model_id:
        return (f"{exc.model_id} is gated: accept its conditions at {hub.endpoint()}/{exc.model_id} (signed in on the Hub), "
                f"then paste a token that can read it into “Hub token” under Advanced and press “Estimate memory” again."), exc.exit_code
    if isinstance(exc, ModelNotFoundError) and exc.option == "token" and exc.model_id:
        return (f"No model {exc.model_id!r} on the Hub; check the spelling. If it is private, paste a token that can read it "
                "into “Hub token” under Advanced."), exc.exit_code
    return user_message(exc, wording)
