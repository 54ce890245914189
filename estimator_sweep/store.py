"""The dataset on disk: ``OUT/data/part-<key>.parquet``, one per (reference, grid), and its card.

Parts are written by the driver only, each atomically (a temporary file in the same folder, then
``os.replace``), so a crash leaves either the old part or the new one, never half of one, and a
task retried after its worker died replaces its part instead of adding a second. Each part's
Parquet metadata records the reference, the commit it answers (``state``) and the grid key, which
is all a rerun reads to decide what to skip.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from estimator_sweep.rows import TRANSIENT, schema

DATA = "data"
META_KEY = b"estimator_sweep"


def part_key(reference: str, grid_key: str) -> str:
    """The part's name: a digest of the reference and the grid (the commit is inside, as ``state``)."""
    return hashlib.sha256(f"{reference}\0{grid_key}".encode()).hexdigest()[:32]


def part_path(out: Path, key: str) -> Path:
    return out / DATA / f"part-{key}.parquet"


@dataclass(frozen=True)
class PartInfo:
    """What a written part answers: the reference, its commit, and whether a rerun should redo it."""

    reference: str
    state: str | None
    grid_key: str
    rows: int
    transient: bool
    failed: int


def write_part(out: Path, key: str, rows: list[dict[str, Any]], *, reference: str, state: str | None, grid_key: str) -> Path:
    """Write ``rows`` as one part, atomically; returns its path."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    target = part_path(out, key)
    target.parent.mkdir(parents=True, exist_ok=True)
    meta = {"reference": reference, "state": state, "grid_key": grid_key, "rows": len(rows),
            "transient": any(r["error_kind"] in TRANSIENT for r in rows), "failed": sum(1 for r in rows if r["error"] is not None)}
    table = pa.Table.from_pylist(rows, schema=schema()).replace_schema_metadata({META_KEY: json.dumps(meta).encode()})
    fd, tmp = tempfile.mkstemp(prefix=".part-", suffix=".tmp", dir=target.parent)
    os.close(fd)
    try:
        pq.write_table(table, tmp, compression="zstd")
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def read_parts(out: Path) -> dict[str, PartInfo]:
    """Every part under ``out`` by key, from its metadata alone (no rows are read)."""
    import json

    import pyarrow.parquet as pq

    found: dict[str, PartInfo] = {}
    folder = out / DATA
    if not folder.is_dir():
        return found
    for path in sorted(folder.glob("part-*.parquet")):
        try:
            meta = json.loads((pq.read_schema(path).metadata or {})[META_KEY])
        except Exception:  # not ours, or unreadable: recomputed and replaced
            continue
        found[path.stem.removeprefix("part-")] = PartInfo(reference=meta["reference"], state=meta["state"], grid_key=meta["grid_key"],
                                                          rows=int(meta["rows"]), transient=bool(meta["transient"]), failed=int(meta["failed"]))
    return found


def read_dataset(out: Path) -> Any:
    """The whole dataset as one Arrow table (empty, with the schema, when nothing is written yet)."""
    import pyarrow.dataset as ds

    folder = out / DATA
    if not folder.is_dir() or not any(folder.glob("part-*.parquet")):
        return schema().empty_table()
    return ds.dataset(str(folder), format="parquet", schema=schema()).to_table()
