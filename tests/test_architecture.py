"""The package's import graph runs one way, stage by stage (docs/ARCHITECTURE.md).

Every ``import`` and ``from ... import`` in ``estimator/``, ``estimator_app/`` and ``app.py`` is read
with :mod:`ast` (``TYPE_CHECKING`` blocks and imports inside functions included). An import may
only point to the same stage or a lower one, the graph of modules must have no cycle, and nothing
in the package imports ``tests``, ``testkit``, ``tools``, ``bench`` or ``scripts``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Lowest first. A module belongs to the longest prefix listed; an import may go to its own rank or lower.
STAGES: tuple[tuple[str, ...], ...] = (
    ("estimator.errors", "estimator.units", "estimator.cache", "estimator.options", "estimator.result", "estimator.messages"),
    ("estimator.source",),
    ("estimator.build",),
    ("estimator.quant",),
    ("estimator.gguf",),
    ("estimator.load",),
    ("estimator.peak", "estimator.peak.parallel"),
    ("estimator.fit", "estimator.serving", "estimator.speed"),
    ("estimator.modules", "estimator.report"),
    ("estimator.api",),
    ("estimator_sweep",),  # the sweep: a front over estimate() (and the only importer of Ray), below the CLI that dispatches to it
    ("estimator.cli", "estimator.__main__", "estimator"),
    ("estimator_app",),
    ("app",),
)
FOREIGN = ("tests", "testkit", "tools", "bench", "scripts")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _sources() -> dict[str, Path]:
    files = [*ROOT.joinpath("estimator").rglob("*.py"), *ROOT.joinpath("estimator_sweep").rglob("*.py"),
             *ROOT.joinpath("estimator_app").rglob("*.py"), ROOT / "app.py"]
    return {_module_name(p): p for p in files}


def _imports(name: str, path: Path) -> set[str]:
    """Absolute names of every module ``path`` imports (relative imports resolved)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)  # ``from pkg import module``
    return found


def _rank(name: str) -> int | None:
    best: tuple[int, int] | None = None
    for rank, prefixes in enumerate(STAGES):
        for prefix in prefixes:
            if (name == prefix or name.startswith(prefix + ".")) and (best is None or len(prefix) > best[1]):
                best = (rank, len(prefix))
    return None if best is None else best[0]


def _graph() -> dict[str, set[str]]:
    sources = _sources()
    return {name: {m for m in _imports(name, path) if m in sources} for name, path in sources.items()}


def test_every_module_has_a_stage() -> None:
    assert [name for name in _sources() if _rank(name) is None] == []


def test_imports_point_down_the_stages() -> None:
    upward = []
    for name, targets in _graph().items():
        for target in targets:
            if name == "estimator" and target.startswith("estimator."):
                continue  # the package's front re-exports from every stage
            rank, target_rank = _rank(name), _rank(target)
            assert rank is not None and target_rank is not None
            if target_rank > rank:
                upward.append(f"{name} -> {target}")
    assert sorted(upward) == []


def test_no_import_cycle() -> None:
    graph = _graph()
    # A package's __init__ re-exporting its own submodules is not a cycle of meaning; edges from a
    # package to its own children are dropped, every other edge is kept.
    edges = {name: {t for t in targets if not t.startswith(name + ".")} for name, targets in graph.items()}
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append([*trail[trail.index(nxt):], nxt] if nxt in trail else [node, nxt])
            elif nxt not in state:
                visit(nxt, [*trail, nxt])
        state[node] = 2

    for start in sorted(edges):
        if start not in state:
            visit(start, [start])
    assert cycles == []


@pytest.mark.parametrize("foreign", FOREIGN)
def test_package_never_imports_test_or_tool_code(foreign: str) -> None:
    offenders = sorted(
        f"{name} imports {m}" for name, path in _sources().items()
        for m in _imports(name, path) if m == foreign or m.startswith(foreign + ".")
    )
    assert offenders == []


def test_checker_sees_type_checking_and_function_imports() -> None:
    """The reader is not blind: a module's lazy and TYPE_CHECKING imports are in its edges."""
    sample = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from estimator.api import x\ndef f():\n    import estimator.peak\n")
    path = ROOT / "tests" / "_sample_for_architecture.py"
    try:
        path.write_text(ast.unparse(sample))
        found = _imports("tests._sample_for_architecture", path)
    finally:
        path.unlink()
    assert {"estimator.api", "estimator.peak"} <= found


def test_tools_benches_and_testkit_never_import_tests() -> None:
    """Shared helpers live in the package or in ``testkit``; ``tests`` is only the test suite."""
    offenders = []
    for folder in ("tools", "bench", "testkit"):
        for path in sorted(ROOT.joinpath(folder).rglob("*.py")):
            name = _module_name(path)
            offenders += [f"{name} imports {m}" for m in sorted(_imports(name, path)) if m == "tests" or m.startswith("tests.")]
    assert offenders == []


# Inside the peak stage, lowest first (docs/ARCHITECTURE.md, "Inside peak/"): the fake-tensor stand-ins and the
# kernel models know nothing of the rest; workload.py is the contract between the engine and the input providers;
# the simulation engine (sim/) runs a workload; the input providers make one; engine.py joins them for Hub models;
# parallel/ runs the engine on several GPUs; rows.py makes the result rows; the package front re-exports.
PEAK_ROOMS: tuple[tuple[str, ...], ...] = (
    ("estimator.peak.fakes", "estimator.peak.kernels"),
    ("estimator.peak.workload",),
    ("estimator.peak.sim",),
    ("estimator.peak.inputs",),
    ("estimator.peak.engine",),
    ("estimator.peak.parallel",),
    ("estimator.peak.rows",),
    ("estimator.peak",),
)
PEAK_FRONT = {"__init__.py", "engine.py", "rows.py", "workload.py"}  # the only modules directly in estimator/peak/


def _room(name: str) -> int | None:
    best: tuple[int, int] | None = None
    for rank, prefixes in enumerate(PEAK_ROOMS):
        for prefix in prefixes:
            if (name == prefix or name.startswith(prefix + ".")) and (best is None or len(prefix) > best[1]):
                best = (rank, len(prefix))
    return None if best is None else best[0]


def test_peak_imports_point_down_its_rooms() -> None:
    upward = [f"{name} -> {target}" for name, targets in _graph().items() if name.startswith("estimator.peak")
              for target in targets if target.startswith("estimator.peak") and (_room(target) or 0) > (_room(name) or 0)]
    assert sorted(upward) == []


def test_every_peak_module_has_a_room() -> None:
    assert [name for name in _sources() if name.startswith("estimator.peak") and _room(name) is None] == []


def test_peak_has_only_its_front_modules_at_the_top() -> None:
    assert sorted(p.name for p in ROOT.joinpath("estimator", "peak").glob("*.py") if p.name not in PEAK_FRONT) == []


def _private_imports(name: str, path: Path) -> list[str]:
    """``from estimator.x import _name`` and ``module._name`` where ``module`` was imported from the package."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found, modules = [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("estimator"):
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.append(f"{name}:{node.lineno} imports {node.module}.{alias.name}")
                modules.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            modules.update((alias.asname or alias.name).split(".")[0] for alias in node.names if alias.name.startswith("estimator"))
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                and isinstance(node.value, ast.Name) and node.value.id in modules):
            found.append(f"{name}:{node.lineno} reads {node.value.id}.{node.attr}")
    return found


def test_no_module_imports_another_modules_private_name() -> None:
    offenders = [line for name, path in _sources().items() if name.startswith("estimator.") for line in _private_imports(name, path)]
    assert offenders == []


def test_private_import_checker_sees_both_forms() -> None:
    path = ROOT / "tests" / "_sample_for_private_imports.py"
    try:
        path.write_text("from estimator.peak import engine\nfrom estimator.peak.engine import _collect\nengine._run()\n")
        found = _private_imports("sample", path)
    finally:
        path.unlink()
    assert found == ["sample:2 imports estimator.peak.engine._collect", "sample:3 reads engine._run"]
