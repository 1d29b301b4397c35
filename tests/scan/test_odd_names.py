"""A target whose /proc text is not UTF-8 (a mapped file's path, its thread
name) scans like any other, with and without the shim, and its heap dumps."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

PROGRAM = Path(__file__).parent / "programs" / "odd_names.c"
CLI = [sys.executable, "-m", "unreachable.cli.main"]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, errors="surrogateescape", timeout=120
    )


@pytest.mark.parametrize("preload", [True, False], ids=["shim", "no-shim"])
def test_scan_finds_the_leak(targets, tmp_path, preload):
    target = targets.start(PROGRAM, str(tmp_path), preload=preload)
    res = cli("scan", str(target.pid), "--json")
    assert res.returncode == 1, res.stderr
    report = json.loads(res.stdout)
    assert report["leak_count"] == target.int("leak_count")
    assert report["leak_bytes"] == target.int("leak_bytes")


def test_heapdump(targets, tmp_path):
    target = targets.start(PROGRAM, str(tmp_path), options="backtrace=4")
    res = cli("heapdump", str(target.pid))
    assert res.returncode == 0, res.stderr
    assert "/mapped-\udcff\udcfe.bin" in res.stdout  # the path's own bytes
