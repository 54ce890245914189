"""A GGUF file's header (metadata and tensor infos), read by HTTP Range requests, parsed with gguf-py's tables.

Only the header is fetched, never the tensor data: the first request asks for 1 MiB and each
next one for four times as much until the header ends inside the bytes read (a header with a
large vocabulary runs to several MiB).

The layout (magic, version, tensor and key/value counts, key/values, tensor infos, padding to
``general.alignment``) is read here with gguf-py's own constants: ``GGUF_MAGIC``, the value types
``GGUFValueType`` and their numpy types (``GGUFReader.gguf_scalar_to_np``), ``GGMLQuantizationType``
and the block table ``GGML_QUANT_SIZES`` for each tensor's bytes. gguf-py's ``GGUFReader`` itself
wants the whole file on disk and takes about 25 s on a Llama-3 header (it builds a numpy view per
vocabulary string); this reads the same header in well under a second. Tests check both agree.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from estimator.errors import HubError, MalformedConfigError

FIRST_READ = 1 << 20
MAX_HEADER = 1 << 28  # 256 MiB: a header larger than this is not a model's header
_LONG_ARRAY = 64  # string arrays longer than this (vocabularies, merges) are kept as their length only
_LONG_NUMBERS = 4096  # number arrays too (token scores and types); per-layer arrays are far shorter


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of a GGUF file: name, ggml type name (``Q4_K``), shape (ne0 first) and its bytes in the file."""

    name: str
    ggml_type: str
    shape: tuple[int, ...]
    n_bytes: int


@dataclass(frozen=True)
class GGUFHeader:
    """The parsed header of one GGUF file.

    ``data_offset`` is where tensor data starts (the header padded to ``alignment``);
    ``metadata`` maps each key to its value, arrays longer than 64 items to their length (``ArrayLength``).
    """

    filename: str
    file_size: int
    data_offset: int
    alignment: int
    metadata: dict[str, Any]
    tensors: tuple[TensorInfo, ...]

    @property
    def padded_end(self) -> int:
        """Where the file ends by its header: the data offset plus every tensor padded to the alignment."""
        align = self.alignment
        return self.data_offset + sum(-(-t.n_bytes // align) * align for t in self.tensors)


@dataclass(frozen=True)
class ArrayLength:
    """A long metadata array (a vocabulary), kept as its element count."""

    length: int


class _Short(Exception):
    """The bytes end inside the header."""


class _Cursor:
    """Reads GGUF values from ``data`` in the file's byte order; raises :class:`_Short` past its end."""

    def __init__(self, data: bytes, order: str) -> None:
        import numpy as np
        from gguf import GGUFReader, GGUFValueType

        self.data, self.pos, self.order, self.np = data, 0, order, np
        self.string_type, self.array_type = GGUFValueType.STRING, GGUFValueType.ARRAY
        self.scalars: dict[int, Any] = {int(vtype): np.dtype(np_type).newbyteorder("<" if order == "<" else ">") for vtype, np_type in GGUFReader.gguf_scalar_to_np.items()}

    def take(self, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.data):
            raise _Short
        (value,) = struct.unpack_from(self.order + fmt, self.data, self.pos)
        self.pos += size
        return value

    def skip(self, n: int) -> int:
        if self.pos + n > len(self.data):
            raise _Short
        self.pos += n
        return self.pos - n

    def string(self) -> str:
        n = self.take("Q")
        start = self.skip(n)
        return self.data[start : start + n].decode("utf-8", errors="replace")

    def value(self, vtype: int) -> Any:
        if vtype == self.string_type:
            return self.string()
        if vtype == self.array_type:
            item, count = self.take("I"), self.take("Q")
            if item in self.scalars:
                dtype = self.scalars[item]
                start = self.skip(dtype.itemsize * count)
                if count > _LONG_NUMBERS:
                    return ArrayLength(count)
                return self.np.frombuffer(self.data, dtype=dtype, count=count, offset=start).tolist()
            if item == self.string_type and count > _LONG_ARRAY:  # a vocabulary: step over it, keep its length
                for _ in range(count):
                    self.skip(self.take("Q"))
                return ArrayLength(count)
            values = [self.value(item) for _ in range(count)]
            return ArrayLength(count) if count > _LONG_ARRAY else values
        dtype = self.scalars.get(vtype)
        if dtype is None:
            raise ValueError(f"unknown GGUF value type {vtype}")
        start = self.skip(dtype.itemsize)
        return self.np.frombuffer(self.data, dtype=dtype, count=1, offset=start)[0].item()


def _parse(data: bytes, filename: str) -> tuple[dict[str, Any], list[TensorInfo], int, int]:
    from gguf import GGML_QUANT_SIZES, GGUF_DEFAULT_ALIGNMENT, GGUF_MAGIC, GGMLQuantizationType

    if len(data) < 24:
        raise _Short
    if struct.unpack_from("<I", data, 0)[0] != GGUF_MAGIC:
        raise MalformedConfigError(f"{filename or 'The file'} is not a GGUF file (it does not start with the GGUF magic).")
    order = ">" if struct.unpack_from("<I", data, 4)[0] & 0xFFFF == 0 else "<"  # a big-endian file's version reads as 0x03000000
    cur = _Cursor(data, order)
    cur.pos = 4
    version = cur.take("I")
    if version not in (2, 3):
        raise MalformedConfigError(f"{filename or 'The file'} is GGUF version {version}; versions 2 and 3 are read.")
    n_tensors, n_kv = cur.take("Q"), cur.take("Q")
    metadata: dict[str, Any] = {}
    for _ in range(n_kv):
        key = cur.string()
        metadata[key] = cur.value(cur.take("I"))
    tensors = []
    for _ in range(n_tensors):
        name = cur.string()
        n_dims = cur.take("I")
        shape = tuple(cur.take("Q") for _ in range(n_dims))
        qtype = GGMLQuantizationType(cur.take("I"))
        cur.take("Q")  # offset within the data section: tensors follow one another, each padded to the alignment
        block, size = GGML_QUANT_SIZES[qtype]
        n = 1
        for dim in shape:
            n *= dim
        tensors.append(TensorInfo(name=name, ggml_type=qtype.name, shape=shape, n_bytes=n // block * size))
    alignment = int(metadata.get("general.alignment", GGUF_DEFAULT_ALIGNMENT))
    if alignment <= 0 or alignment & (alignment - 1):
        raise MalformedConfigError(f"{filename or 'The file'} states an alignment of {alignment}, not a power of two.")
    return metadata, tensors, -(-cur.pos // alignment) * alignment, alignment


def parse_header(data: bytes, file_size: int, filename: str = "") -> GGUFHeader | None:
    """The header of a GGUF file of ``file_size`` bytes whose first bytes are ``data``; None if ``data`` ends inside it.

    Raises :class:`~estimator.errors.MalformedConfigError` for a file that is not GGUF, or whose
    header cannot be read although ``data`` holds the whole file.
    """
    try:
        metadata, tensors, data_offset, alignment = _parse(data, filename)
    except _Short:
        if len(data) >= file_size:
            raise MalformedConfigError(f"{filename or 'The file'} ends inside its GGUF header; it is cut short or not a GGUF file.") from None
        return None
    except (ValueError, UnicodeDecodeError, OverflowError) as exc:
        raise MalformedConfigError(f"{filename or 'The file'} has a GGUF header that cannot be read: {exc}") from None
    return GGUFHeader(filename=filename, file_size=file_size, data_offset=data_offset, alignment=alignment, metadata=metadata, tensors=tuple(tensors))


def read_header(filename: str, file_size: int, read: Callable[[int, int], bytes], first_read: int = FIRST_READ) -> GGUFHeader:
    """Read and parse the header of ``filename`` with ``read(start, stop)``, growing the read until it is whole.

    ``first_read``: the bytes asked first (a sibling file's header length saves the growing reads).
    """
    data = b""
    want = min(max(first_read, 1024), file_size)
    while True:
        if want > len(data):
            data += read(len(data), want)
        header = parse_header(data, file_size, filename)
        if header is not None:
            return header
        if len(data) >= min(file_size, MAX_HEADER):
            raise HubError(f"The GGUF header of {filename} is larger than {MAX_HEADER >> 20} MiB or cut short; it cannot be read.")
        if len(data) < want:  # the server sent less than asked although the file is longer
            raise HubError(f"The Hub sent {len(data):,} bytes of {filename} where {want:,} were asked; try again.")
        want = min(want * 4, file_size, MAX_HEADER)
