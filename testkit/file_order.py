"""The order scripts/test.sh hands test files to its two pytest-xdist workers: longest first.

With ``--dist loadfile`` each worker takes whole files from one queue; a long file taken last keeps one worker busy
while the other idles (the run's wall time is the busier worker's). Longest-first ("LPT") list scheduling ends the
two workers within about the last file's length of each other. ``tests/conftest.py`` orders the collected files by
the seconds in ``tests/file_seconds.json`` (a file not in it counts 0 s and keeps its place after the measured ones);
scripts/test.sh passes ``--no-loadscope-reorder`` so that xdist keeps that order instead of sorting files by how many
tests they hold.

Refresh the table after a run that wrote a JUnit report (each test case's setup + call + teardown seconds)::

    python -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder --junitxml=/tmp/run.xml
    python -m testkit.file_order /tmp/run.xml > tests/file_seconds.json

The seconds only order the files: a stale table costs balance, never a result.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

SECONDS_FILE = Path(__file__).resolve().parents[1] / "tests" / "file_seconds.json"


def file_seconds_from_junit(path: str | Path) -> dict[str, float]:
    """``{test file path: seconds}`` summed over the test cases of a JUnit report (pytest's ``--junitxml``)."""
    totals: dict[str, float] = defaultdict(float)
    for case in ET.parse(path).iter("testcase"):
        module = case.get("classname", "").split(".")
        # classname is the dotted module path, a test class's name appended when there is one
        for cut in range(len(module), 0, -1):
            candidate = "/".join(module[:cut]) + ".py"
            if (SECONDS_FILE.parents[1] / candidate).exists():
                totals[candidate] += float(case.get("time", "0"))
                break
    return dict(totals)


def load_seconds(path: Path = SECONDS_FILE) -> dict[str, float]:
    """The committed table (empty when it is missing: collection order is kept)."""
    if not path.exists():
        return {}
    return {str(k): float(v) for k, v in json.loads(path.read_text()).items()}


def longest_first(items: Sequence[Any], seconds: Mapping[str, float], file_of: Any) -> list[Any]:
    """``items`` regrouped by file (``file_of(item)``, a path relative to the repository root), files in decreasing
    ``seconds`` (0 for a file not in the table), ties in their first item's collection order; each file's items keep
    their order."""
    groups: dict[str, list[Any]] = {}
    for item in items:
        groups.setdefault(file_of(item), []).append(item)
    order = sorted(enumerate(groups), key=lambda pair: (-seconds.get(pair[1], 0.0), pair[0]))
    return [item for _, name in order for item in groups[name]]


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m testkit.file_order JUNIT_XML > tests/file_seconds.json", file=sys.stderr)
        return 2
    totals = file_seconds_from_junit(argv[0])
    print(json.dumps({name: round(totals[name], 1) for name in sorted(totals, key=lambda n: -totals[n])}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
