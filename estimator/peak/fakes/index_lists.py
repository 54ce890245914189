"""Indexes written as Python sequences of 0-d tensors, stacked into one index tensor before the index runs.

``tensor[rows, cols] = value`` with ``rows`` and ``cols`` tuples of 0-d tensors (UDOP's
``combine_image_text_embeddings``: ``rows, cols = zip(*ind)``) makes PyTorch's C++ indexing read every
element's data directly, outside the dispatcher: a fake tensor has no data, so the read fails even where
:class:`~estimator.peak.fakes.known_values.KnownValues` knows the values. :class:`IndexLists` is a torch function
mode that replaces each such sequence by ``torch.stack`` of its elements: the same advanced index (a list
of integers and a 1-d integer tensor select the same elements), now an op the known values follow.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.overrides import TorchFunctionMode

__all__ = ["IndexLists"]

_INDEXING = {torch.Tensor.__getitem__, torch.Tensor.__setitem__}


def _sequence(index: Any) -> Any:
    """A list or tuple of 0-d tensors as one 1-d tensor; anything else as is."""
    if isinstance(index, (list, tuple)) and index and all(isinstance(i, torch.Tensor) and i.dim() == 0 for i in index):
        return torch.stack(list(index))
    return index


def _stacked(index: Any) -> Any:
    """The index with its sequences stacked: each entry of a tuple (``x[rows, cols]``: the tuple itself is one
    index per dimension, never stacked), or a list (``x[[i, j]]``)."""
    if isinstance(index, tuple):
        return tuple(_sequence(i) for i in index)
    return _sequence(index) if isinstance(index, list) else index


class IndexLists(TorchFunctionMode):
    """See the module docstring."""

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None) -> Any:
        if func in _INDEXING and len(args) >= 2:
            args = (args[0], _stacked(args[1]), *args[2:])
        return func(*args, **(kwargs or {}))
