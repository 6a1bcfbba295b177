"""docs/architecture.md's layers hold: every module of scxctl is in one layer, and imports only from
its own layer and those below it (imports inside functions count: they hide a cycle, not remove it)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "scxctl"


def layers() -> list[list[str]]:
    """The `where` column of the layer table, top layer first: module paths (`scxctl/x.py`) and
    package folders (`scxctl/x/`) of each row."""
    text = (ROOT / "docs/architecture.md").read_text()
    table = text.split("## Layers", 1)[1].split("\n\n", 2)[1]
    rows = [line.split("|")[2] for line in table.splitlines()[2:]]
    found = [re.findall(r"`(scxctl/[^`*]*)`", where) for where in rows]
    return [paths for paths in found if paths]


def layer_of(path: Path, table: list[list[str]]) -> int:
    """Index of the row that names the module `path` (smaller is higher); the most specific wins."""
    rel = path.relative_to(ROOT).as_posix()
    best = [(len(p), i) for i, paths in enumerate(table) for p in paths
            if rel == p or (p.endswith("/") and rel.startswith(p))]
    assert best, f"{rel} is in no layer of docs/architecture.md"
    return max(best)[1]


def module_file(name: str) -> Path | None:
    base = ROOT / Path(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def imported_files(path: Path) -> set[Path]:
    """The scxctl modules `path` imports, at any depth of its code."""
    out: set[Path] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            if name.split(".")[0] == "scxctl" and (f := module_file(name)) is not None:
                out.add(f)
    return out


def modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_the_table_names_layers() -> None:
    table = layers()
    assert len(table) == 4, table  # CLI, library, kernel access, shared
    assert any("scxctl/commands/" in paths for paths in table[:1])


def test_every_import_goes_to_the_same_layer_or_below() -> None:
    table = layers()
    wrong = []
    for path in modules():
        mine = layer_of(path, table)
        for dep in imported_files(path):
            if dep != path and layer_of(dep, table) < mine:
                wrong.append(f"{path.relative_to(ROOT)} imports {dep.relative_to(ROOT)}")
    assert wrong == []


def test_no_import_cycle() -> None:
    graph = {path: imported_files(path) - {path} for path in modules()}
    state: dict[Path, int] = {}
    cycles: list[str] = []

    def visit(node: Path, stack: list[Path]) -> None:
        state[node] = 1
        for dep in graph.get(node, ()):
            if state.get(dep) == 1:
                cycle = [*stack[stack.index(dep):], dep]
                cycles.append(" -> ".join(p.relative_to(ROOT).as_posix() for p in cycle))
            elif dep not in state:
                visit(dep, [*stack, dep])
        state[node] = 2

    for path in graph:
        if path not in state:
            visit(path, [path])
    assert cycles == []
