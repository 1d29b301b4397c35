"""The tree stays ruff-clean, lint and format (pyproject.toml holds the rules)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("args", [["check"], ["format", "--check"]], ids=["check", "format"])
def test_ruff_is_clean(args: list[str]) -> None:
    ruff = shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed (pip install '.[test]')")
    res = subprocess.run([ruff, *args, str(ROOT)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
