"""The packages import each other one way: no cycle between them, and none
between the scan's stage modules (unreachable/scan/*.py).

The graph is read from the source, not from sys.modules: every import
statement, at module level or inside a function (a lazy import is still a
dependency), except those under `if TYPE_CHECKING:`, which name types only.
A package's unit is its first component below unreachable/ (capture,
report, ...); a top-level module (writing.py) is a unit of its own, so a
cycle that passes through one still counts.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "unreachable"
GENERATED = ("v1",)
Graph = dict[str, dict[str, list[str]]]  # module -> imported module -> ["path:line"]


def module_name(path: Path, package: Path) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement, however deep, outside `if TYPE_CHECKING:` bodies."""
    found: list[ast.Import | ast.ImportFrom] = []
    todo: list[ast.AST] = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
            continue
        if isinstance(node, ast.If) and _type_checking(node.test):
            todo.extend(node.orelse)
            continue
        todo.extend(ast.iter_child_nodes(node))
    return found


def import_graph(package: Path = PACKAGE) -> Graph:
    """Module -> the modules of the package it imports, each with where."""
    paths = {
        module_name(p, package): p
        for p in sorted(package.rglob("*.py"))
        if p.relative_to(package).parts[0] not in GENERATED
    }
    graph: Graph = {}
    for name, path in paths.items():
        edges: dict[str, list[str]] = defaultdict(list)
        here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        for node in _imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = node.module or ""
                if node.level:
                    up = here[: len(here) - node.level + 1]
                    base = ".".join([*up, *([base] if base else [])])
                # `from pkg import module` imports the module, not the package.
                targets = [
                    f"{base}.{a.name}" if f"{base}.{a.name}" in paths else base for a in node.names
                ]
            where = f"{path.relative_to(package.parent)}:{node.lineno}"
            for target in targets:
                if target in paths and target != name and where not in edges[target]:
                    edges[target].append(where)
        graph[name] = dict(edges)
    return graph


def unit_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def unit_graph(graph: Graph) -> Graph:
    """The graph between units (packages), each edge with the imports that make it."""
    unit = unit_of
    units: Graph = defaultdict(lambda: defaultdict(list))
    for module, edges in graph.items():
        units[unit(module)]  # a unit that imports nothing is still a node
        for target, where in edges.items():
            if unit(module) != unit(target):
                units[unit(module)][unit(target)].extend(where)
    return {u: dict(e) for u, e in units.items()}


def cycles(graph: Graph) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, {}):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def describe(graph: Graph, component: list[str]) -> str:
    lines = [" <-> ".join(component)]
    for a in component:
        for b in component:
            if b in graph.get(a, {}):
                lines.append(f"  {a} -> {b}: {', '.join(graph[a][b][:3])}")
    return "\n".join(lines)


def test_no_cycle_between_the_packages() -> None:
    """Break a new cycle by moving the shared piece down a layer (as the
    report model sits in model/, below triage/ that changes it and report/
    that prints it), not by letting it stand."""
    units = unit_graph(import_graph())
    found = cycles(units)
    assert not found, "import cycles between packages:\n" + "\n".join(
        describe(units, c) for c in found
    )


def test_no_cycle_between_the_scan_stages() -> None:
    graph = import_graph()
    # scan/__init__.py is a node too: it imports run.py, so a stage that
    # imported `unreachable.scan` would close a cycle.
    stages = {m: e for m, e in graph.items() if m.split(".")[:2] == ["unreachable", "scan"]}
    within = {m: {t: w for t, w in e.items() if t in stages} for m, e in stages.items()}
    found = cycles(within)
    assert not found, "import cycles between scan stages:\n" + "\n".join(
        describe(within, c) for c in found
    )


def test_the_graph_sees_every_kind_of_import(tmp_path: Path) -> None:
    """Module-level, function-level, relative and `from pkg import module`
    imports are edges; an import under TYPE_CHECKING is not."""
    pkg = tmp_path / "unreachable"
    for sub in ("a", "b", "c", "d"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "a" / "one.py").write_text("from unreachable.b import two\n")
    (pkg / "b" / "two.py").write_text("def f():\n    from ..c import three\n")
    (pkg / "c" / "three.py").write_text("import unreachable.a.one\n")
    (pkg / "d" / "four.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from unreachable.a import one\n"
        "else:\n    from . import five\n"
    )
    (pkg / "d" / "five.py").write_text("")
    graph = import_graph(pkg)
    assert graph["unreachable.a.one"] == {"unreachable.b.two": ["unreachable/a/one.py:1"]}
    assert graph["unreachable.b.two"] == {"unreachable.c.three": ["unreachable/b/two.py:2"]}
    assert graph["unreachable.d.four"] == {"unreachable.d.five": ["unreachable/d/four.py:5"]}
    assert cycles(unit_graph(graph)) == [["a", "b", "c"]]
