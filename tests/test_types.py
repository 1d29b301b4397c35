"""unreachable/ type-checks strictly (pyproject.toml [tool.mypy]), and
_native.pyi describes what the extension exports."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from unreachable import _native

ROOT = Path(__file__).resolve().parent.parent


def test_mypy_is_clean(tmp_path: Path) -> None:
    if importlib.util.find_spec("mypy") is None:
        pytest.skip("mypy is not installed (pip install '.[test]')")
    res = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache")],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stdout + res.stderr


def test_stub_names_every_export() -> None:
    """Each function, class and constant of _native is in the stub: mypy
    trusts the stub alone, so a missing name would go unchecked."""
    tree = ast.parse((ROOT / "unreachable" / "_native.pyi").read_text())
    typed = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            typed.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            typed.add(node.target.id)
    exported = {n for n in vars(_native) if not n.startswith("__")}
    assert exported - typed == set()


def test_stub_decodes_as_the_extension_does() -> None:
    """abi_decode's and abi_decode_array's overloads name each struct's
    TypedDict; its keys are the fields abi_py.c decodes, in abi_fields' order."""
    tree = ast.parse((ROOT / "unreachable" / "_native.pyi").read_text())
    fields = {
        node.name: [
            s.target.id
            for s in node.body
            if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
        ]
        for node in tree.body
        if isinstance(node, ast.ClassDef)
    }
    checked = 0
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in ("abi_decode", "abi_decode_array"):
            literal = node.args.posonlyargs[0].annotation
            assert isinstance(literal, ast.Subscript) and isinstance(literal.slice, ast.Constant)
            returns = node.returns
            if isinstance(returns, ast.Subscript):  # list[X]
                returns = returns.slice
            assert isinstance(returns, ast.Name)
            struct = literal.slice.value
            raw = bytes(_native.abi_sizeof(struct))
            assert list(_native.abi_decode(struct, raw)) == fields[returns.id], struct
            assert [f for f, _, _ in _native.abi_fields(struct)] == fields[returns.id], struct
            checked += 1
    assert checked == 22
