"""Rows from the checkpoint as stored: safetensors headers read over HTTP Range, no torch needed.

A safetensors header lists every tensor's dtype and shape, so the bytes of the checkpoint loaded in
a dtype are exact for what it stores: floating tensors take the row's dtype, integer and packed
(pre-quantized) tensors keep theirs. Buffers that are not saved (rotary ``inv_freq``) are not in a
checkpoint; tied weights are stored once. The largest layer groups tensors by the repeated block
they belong to (``model.layers.12.``), or by their module where they are not in one — the blocks
``device_map="auto"`` keeps whole in transformers' decoder models. A local folder's checkpoint
headers are read here too (:func:`local_checkpoint`), as transformers reads them for ``dtype="auto"``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from estimator.errors import MalformedConfigError
from estimator.options import DType

# Bytes per element of the safetensors dtypes (safetensors' own names).
SAFETENSORS_ITEMSIZE: Mapping[str, float] = {
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "F4": 0.5,
    "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U64": 8, "U32": 4, "U16": 2, "U8": 1, "BOOL": 1,
}
FLOATING = {"F64", "F32", "F16", "BF16"}
ROW_ITEMSIZE = {DType.FLOAT32: 4, DType.FLOAT16: 2, DType.BFLOAT16: 2}
_BLOCK = re.compile(r"^(.*?\.\d+)\.")


@dataclass(frozen=True)
class StoredTensor:
    name: str
    dtype: str
    numel: int
    shape: tuple[int, ...] | None = None  # None where only the element count is known


@dataclass(frozen=True)
class StoredBytes:
    total_bytes: int
    largest_layer_bytes: int
    largest_layer_name: str
    floating_parameters: int
    quantized: bool


def group_of(name: str) -> str:
    """The no-split group of a tensor name: its numbered block, else its module."""
    match = _BLOCK.match(name)
    if match:
        return match.group(1)
    return name.rsplit(".", 1)[0] if "." in name else name


def is_prequantized(tensors: list[StoredTensor]) -> bool:
    return any(t.dtype not in FLOATING and t.dtype not in ("I64", "BOOL") for t in tensors)


def stored_bytes(tensors: list[StoredTensor], dtype: DType) -> StoredBytes:
    """Bytes of the stored tensors loaded as ``dtype`` (float32, float16 or bfloat16)."""
    itemsize = ROW_ITEMSIZE[dtype]
    groups: dict[str, float] = {}
    total: float = 0.0
    floating = 0
    for tensor in tensors:
        size: float
        if tensor.dtype in FLOATING:
            size = tensor.numel * itemsize
            floating += tensor.numel
        else:
            size = tensor.numel * SAFETENSORS_ITEMSIZE.get(tensor.dtype, 1)
        total += size
        group = group_of(tensor.name)
        groups[group] = groups.get(group, 0) + size
    # ties (every decoder block alike; an untied embedding and head) go to the first in checkpoint order
    name, largest = max(groups.items(), key=lambda item: item[1]) if groups else ("", 0)
    return StoredBytes(int(total), int(largest), name, floating, is_prequantized(tensors))


def tensors_from_shapes(shapes: Mapping[str, tuple[str, Sequence[int]] | list[Any]]) -> list[StoredTensor]:
    """``{name: (safetensors dtype, shape)}`` as a list of tensors."""
    tensors: list[StoredTensor] = []
    for name, (dtype, dims) in shapes.items():
        if not isinstance(dtype, str) or not isinstance(dims, (list, tuple)) or not all(
            isinstance(dim, int) and not isinstance(dim, bool) and dim >= 0 for dim in dims
        ):
            raise MalformedConfigError(f"The safetensors header entry {name!r} has a malformed dtype or shape ({dtype!r}, {dims!r}).")
        shape = tuple(int(dim) for dim in dims)
        numel = 1
        for dim in shape:
            numel *= dim
        tensors.append(StoredTensor(name=name, dtype=dtype, numel=numel, shape=shape))
    return tensors


def tensors_from_metadata(metadata: object) -> list[StoredTensor]:
    """Flatten huggingface_hub's ``SafetensorsRepoMetadata`` into one list of tensors, in checkpoint order: files by
    name (``-00001-of-`` first), each in its header's order. ``get_safetensors_metadata`` fills ``files_metadata`` as
    its threads finish, so without the sort a tie for the largest layer was named differently from run to run."""
    tensors: list[StoredTensor] = []
    files = getattr(metadata, "files_metadata", {})
    for _, file_metadata in sorted(files.items()):
        tensors += tensors_from_shapes({name: (info.dtype, info.shape) for name, info in file_metadata.tensors.items()})
    return tensors


_HEADER_LIMIT = 100 << 20  # bytes: a safetensors header larger than this is not read


def local_header(path: Path) -> list[StoredTensor] | None:
    """A local safetensors file's tensors from its header (8-byte little-endian length, then JSON), or None."""
    import json
    import struct

    try:
        with path.open("rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            if length > _HEADER_LIMIT:
                return None
            header = json.loads(handle.read(length))
    except (OSError, ValueError, RecursionError, struct.error):
        return None
    if not isinstance(header, dict):
        return None
    try:
        return tensors_from_shapes({name: (info["dtype"], info["shape"]) for name, info in header.items()
                                    if name != "__metadata__" and isinstance(info, dict) and "dtype" in info and "shape" in info})
    except MalformedConfigError:  # a header transformers could not load either: no dtype is read from it
        return None


def local_checkpoint(folder: Path) -> tuple[object, list[StoredTensor] | None]:
    """A local folder's shard-index dtype and the tensors of its first checkpoint file, as transformers reads them."""
    import json

    index: object = None
    first = folder / "model.safetensors"
    index_path = folder / "model.safetensors.index.json"
    if not first.is_file() and index_path.is_file():
        try:
            data = json.loads(index_path.read_text(encoding="utf-8"))
            index = (data.get("metadata") or {}).get("dtype")
            first = folder / sorted(set(data["weight_map"].values()))[0]
        except (OSError, ValueError, KeyError, IndexError, AttributeError, TypeError, RecursionError):
            return None, None
    return index, local_header(first) if first.is_file() else None
