"""The closed vocabulary of memory components a peak is broken down into.

One vocabulary for the whole project: this is :class:`estimator.options.Component`, whose values
are the public JSON keys of ``components`` (see the project's contract).
"""

from __future__ import annotations

from estimator.options import Component

__all__ = ["Component"]
