"""No function or method in unreachable/ is longer than MAX_LINES: a longer
one is split into named steps. The generated unreachable/v1 is left out."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "unreachable"
GENERATED = PACKAGE / "v1"
MAX_LINES = 80


def long_functions(package: Path = PACKAGE) -> list[str]:
    """'path:line name (N lines)' of every function, method and nested
    function longer than MAX_LINES, decorators and docstring included."""
    found = []
    for path in sorted(package.rglob("*.py")):
        if path.is_relative_to(GENERATED):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            lines = (node.end_lineno or node.lineno) - first + 1
            if lines > MAX_LINES:
                where = path.relative_to(package.parent)
                found.append(f"{where}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_function_is_longer_than_the_limit() -> None:
    long = long_functions()
    assert not long, f"longer than {MAX_LINES} lines:\n" + "\n".join(long)


def _body(indent: str, lines: int) -> str:
    return "".join(f"{indent}x{i} = {i}\n" for i in range(lines))


def test_each_long_function_is_named(tmp_path: Path) -> None:
    """Functions, nested functions and methods count, each with its decorators;
    a function of exactly MAX_LINES does not."""
    package = tmp_path / "pkg"
    package.mkdir()
    source = (
        "def fits():\n" + _body("    ", MAX_LINES - 1) + "\n\n"
        "def outer():\n    def inner():\n" + _body("        ", MAX_LINES) + "\n\n"
        "class C:\n    @staticmethod\n    def method():\n" + _body("        ", MAX_LINES - 1)
    )
    (package / "m.py").write_text(source)
    outer = MAX_LINES + 3
    method = outer + MAX_LINES + 6
    assert long_functions(package) == [
        f"pkg/m.py:{outer} outer ({MAX_LINES + 2} lines)",
        f"pkg/m.py:{outer + 1} inner ({MAX_LINES + 1} lines)",
        f"pkg/m.py:{method} method ({MAX_LINES + 1} lines)",
    ]
