"""Byte counts for people.

Convention: binary units, labelled honestly. 1 KiB = 1024 bytes, 1 MiB = 1024 KiB,
1 GiB = 1024 MiB, 1 TiB = 1024 GiB (IEC 80000-13, as rich's ``filesize`` states its own).
Exact integers travel in JSON and CSV; rounding happens only here, when rendering.
"""

from __future__ import annotations

_UNITS = ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB")


def format_bytes(n: int | None, *, precision: int = 2) -> str:
    """Render ``n`` bytes in the largest binary unit that keeps the value at least 1.

    ``None`` (a value that could not be computed) renders as ``"—"``.

    >>> format_bytes(1536)
    '1.50 KiB'
    >>> format_bytes(16 * 1024**3)
    '16.00 GiB'
    """
    if n is None:
        return "—"
    if n < 1024:
        return f"{n} bytes" if n != 1 else "1 byte"
    value = float(n)
    unit = 0
    while value >= 1024 and unit < len(_UNITS) - 1:
        value /= 1024
        unit += 1
    return f"{value:.{precision}f} {_UNITS[unit]}"

