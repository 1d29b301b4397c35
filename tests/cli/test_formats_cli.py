"""Output formats and heap dump files through the CLI, as users chain them."""

from __future__ import annotations

import gzip
import subprocess
import sys
from pathlib import Path

PROGRAMS = Path(__file__).parent.parent / "scan" / "programs"
CLI = [sys.executable, "-m", "unreachable.cli.main"]


def cli(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*CLI, *args], capture_output=True, timeout=120)


def test_scan_collapsed_and_pprof(targets, tmp_path):
    target = targets.start(PROGRAMS / "globals.c", options="backtrace=16")
    res = cli("scan", str(target.pid), "--format", "collapsed")
    assert res.returncode == 1, res.stderr
    lines = res.stdout.decode().splitlines()
    assert len(lines) == 1 and lines[0].endswith(" 300") and "setup" in lines[0]
    out = tmp_path / "leaks.pb.gz"
    res = cli("scan", str(target.pid), "--format", "pprof", "-o", str(out))
    assert res.returncode == 1, res.stderr
    assert res.stdout == b""
    assert len(gzip.decompress(out.read_bytes())) > 0


def test_contradictory_format_flags():
    res = cli("scan", "1", "--json", "--format", "text")
    assert res.returncode == 2 and b"contradict" in res.stderr


def test_heapdump_to_file_and_back(targets, tmp_path):
    target = targets.start(PROGRAMS / "globals.c", options="backtrace=16")
    dump = tmp_path / "heap.txt"
    res = cli("heapdump", str(target.pid), "-o", str(dump))
    assert res.returncode == 0, res.stderr
    text = dump.read_text()
    assert text.startswith("Android Native Heap Dump v1.2\n")
    assert "\nMAPS\n" in text and text.rstrip().endswith("END")
    res = cli("heapdump", "--file", str(dump))
    assert res.returncode == 0, res.stderr
    assert b"setup" in res.stdout  # symbolized from the dump's MAPS section
    res = cli("heapdump", "--file", str(dump), "--format", "collapsed")
    assert res.returncode == 0 and b"setup" in res.stdout


def test_heapdump_bad_input(tmp_path):
    bogus = tmp_path / "bogus.txt"
    bogus.write_text("hello\n")
    for args in (
        ("heapdump",),
        ("heapdump", "--file", str(bogus)),
        ("heapdump", "--file", "/nope"),
    ):
        res = cli(*args)
        assert res.returncode == 2, args
        assert len(res.stderr.decode().strip().splitlines()) == 1, res.stderr
        assert b"Traceback" not in res.stderr
