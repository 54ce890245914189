"""Every error the estimator raises on purpose, in one tree.

::

    EstimatorError                      base; ``exit_code`` says how the CLI exits
    ├── InputError (ValueError)         exit 2: the request cannot be answered as asked
    │   ├── BadReferenceError           not a Hub id, Hub URL or folder with a config.json
    │   ├── BadOptionError              an option outside its vocabulary or range
    │   ├── ModelNotFoundError          no such repo (or private and no token that opens it)
    │   ├── RevisionNotFoundError       the repo exists, the revision does not
    │   ├── GatedModelError             gated repo and no token, or a token not on its list
    │   ├── NoConfigError               the repo or folder has no config the estimator can read
    │   ├── MalformedConfigError        a config that is not valid JSON or has wrong types
    │   ├── UnknownArchitectureError    a model type no installed library knows
    │   ├── RemoteCodeRequiredError     the model needs code from its repo; not run without the flag
    │   ├── AbsurdSizeError             a config too large to be real; refused before building
    │   ├── LibraryMissingError         the library that builds this model is not installed
    │   ├── UnsupportedError            a combination the estimator does not handle (yet)
    │   └── PostingError                a result the Hub cannot take as a discussion: not a Hub model's,
    │                                   no token, or a token the Hub refused for posting
    └── HubError                        exit 3: the Hub or the network failed
        ├── HubTimeoutError             no answer within the timeout
        └── HubRateLimitedError         HTTP 429

Each error carries structured fields (``model_id``, ``revision``, ``option``) and a message that
says what to do. Where the message names an option a user can set (``seq_len``, ``token``,
``trust_remote_code``), it holds an :class:`Option` rather than a spelling: each adapter words it
for its own user (the CLI says ``--seq-len``, the page names the form's field) through
:meth:`EstimatorError.worded`; ``str(exc)`` and ``exc.message`` use the contract's flag names.
``user_message`` in :mod:`estimator.messages` is the one place that turns any exception into the
line a user sees. Tokens never appear in these messages.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Option:
    """An option named inside an error message, by its Python keyword (``seq_len``, ``token``)."""

    name: str


Message = str | Sequence[str | Option]
OptionWording = Callable[[Option], str]


def flag(option: Option) -> str:
    """The contract's spelling of an option: its CLI flag (``seq_len`` -> ``--seq-len``)."""
    return "--" + option.name.replace("_", "-")


class EstimatorError(Exception):
    """Base of every deliberate error; ``exit_code`` follows the contract."""

    exit_code = 1

    def __init__(self, message: Message, *, model_id: str | None = None, revision: str | None = None, option: str | None = None) -> None:
        self.parts: tuple[str | Option, ...] = (message,) if isinstance(message, str) else tuple(message)
        named = [part.name for part in self.parts if isinstance(part, Option)]
        self.option = option if option is not None else (named[0] if named else None)
        self.model_id = model_id
        self.revision = revision
        self.message = self.worded(flag)
        super().__init__(self.message)

    def worded(self, option: OptionWording) -> str:
        """The message with every :class:`Option` spelled by ``option`` (an adapter's wording)."""
        return "".join(part if isinstance(part, str) else option(part) for part in self.parts)

    def __str__(self) -> str:
        return self.message


class InputError(EstimatorError, ValueError):
    """The request cannot be answered as asked (exit status 2)."""

    exit_code = 2


class BadReferenceError(InputError):
    """The model reference is neither a Hub id, a Hub URL nor a folder with a config.json."""


class BadOptionError(InputError):
    """An option is outside its vocabulary or its range."""


class ModelNotFoundError(InputError):
    """The repo does not exist, or is private and no token opens it."""


class RevisionNotFoundError(InputError):
    """The repo exists but the revision does not."""


class GatedModelError(InputError):
    """A gated repo and no token, or a token whose user is not on the access list."""


class NoConfigError(InputError):
    """No config the estimator can read (config.json, model_index.json, ...)."""


class MalformedConfigError(InputError):
    """A config that is not valid JSON, or whose fields have the wrong types."""


class UnknownArchitectureError(InputError):
    """A model type or architecture that no installed library knows."""


class RemoteCodeRequiredError(InputError):
    """The model is defined by code in its repo; it is run only with --trust-remote-code."""


class AbsurdSizeError(InputError):
    """A config far larger than any real model; refused before anything is built."""


class LibraryMissingError(InputError):
    """The library that builds this kind of model is not installed."""


class UnsupportedError(InputError):
    """A combination of model and options the estimator does not handle."""


class PostingError(InputError):
    """A result that cannot be posted as a Hub discussion; ``status`` is the Hub's HTTP status, if it answered."""

    def __init__(self, message: Message, *, model_id: str | None = None, status: int | None = None) -> None:
        super().__init__(message, model_id=model_id)
        self.status = status


class HubError(EstimatorError):
    """The Hub or the network failed (exit status 3)."""

    exit_code = 3


class HubTimeoutError(HubError):
    """The Hub did not answer within the timeout."""


class HubRateLimitedError(HubError):
    """The Hub answered HTTP 429 (too many requests)."""


__all__ = [
    "AbsurdSizeError",
    "BadOptionError",
    "BadReferenceError",
    "EstimatorError",
    "GatedModelError",
    "HubError",
    "HubRateLimitedError",
    "HubTimeoutError",
    "InputError",
    "LibraryMissingError",
    "MalformedConfigError",
    "ModelNotFoundError",
    "NoConfigError",
    "Option",
    "PostingError",
    "RemoteCodeRequiredError",
    "RevisionNotFoundError",
    "UnknownArchitectureError",
    "UnsupportedError",
]
