"""Placeholder: CUDA SDPA modelling (filled in below in a later commit)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

__all__ = ["cuda_sdpa"]


@contextlib.contextmanager
def cuda_sdpa() -> Iterator[None]:
    yield
