"""Leaks without backtraces named by their C++ class (a first word pointing
into a `vtable for X` symbol) and folded by size and type
(unreachable/fold/types.py), under the shim without backtrace=N and without
the shim (glibc's heap walked)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from unreachable.report.json_report import report_to_dict
from unreachable.report.text import BACKTRACE_HINT
from unreachable.rpc.convert import report_from_dict, report_to_model
from unreachable.scan import ScanOptions, scan

PROGRAMS = Path(__file__).parent / "programs"
CLI = [sys.executable, "-m", "unreachable.cli.main"]


def _start(targets, shim: bool, options: str | None = None):
    return targets.start(
        PROGRAMS / "typed_leaks.cpp",
        cxx=True,
        preload=shim,
        wait_helper=shim,
        options=options,
    )


def _groups(report) -> dict[tuple[int, str], int]:
    """(size, type) -> blocks, over every entry."""
    out: dict[tuple[int, str], int] = {}
    for e in report.leaks:
        key = (e.size, e.type)
        out[key] = out.get(key, 0) + 1 + e.similar_count
    return out


@pytest.mark.parametrize("under_shim", [True, False], ids=["shim", "no-shim"])
def test_classes_named_and_folded(targets, under_shim):
    target = _start(targets, under_shim)
    report = scan(target.pid, ScanOptions())
    assert report.leak_count == target.int("leak_count")
    # Under the shim, requested sizes; without it, chunk usable sizes.
    small = target.int("size") if under_shim else target.int("size") + 8
    big = 100 if under_shim else 104
    assert _groups(report) == {
        (small, "zoo::Fish"): target.int("fish"),
        (small, "Bird"): target.int("bird"),
        (small, ""): target.int("untyped"),
        (big, ""): target.int("big"),
    }, [(hex(e.address), e.size, e.type, e.similar_count) for e in report.leaks]
    assert len(report.leaks) == 4
    assert all(not e.backtrace and e.contents is None for e in report.leaks)
    assert target.alive() and target.tracer() == 0


@pytest.mark.parametrize("under_shim", [True, False], ids=["shim", "no-shim"])
def test_contents_keep_each_block_apart_and_named(targets, under_shim):
    """With every entry's contents asked for, nothing is folded; each block
    is named by its own first word."""
    target = _start(targets, under_shim)
    report = scan(target.pid, ScanOptions(contents=True))
    assert len(report.leaks) == report.leak_count == target.int("leak_count")
    types = [e.type for e in report.leaks]
    assert types.count("zoo::Fish") == target.int("fish")
    assert types.count("Bird") == target.int("bird")
    assert all(e.contents is not None for e in report.leaks)
    random_first = [
        e for e in report.leaks if int.from_bytes(e.contents[:8], "little") >> 8 == 0x1234567890ABCD
    ]
    assert len(random_first) == target.int("untyped")
    assert all(e.type == "" for e in random_first)


def test_vtables_kept_in_the_symbol_cache(targets, tmp_path, monkeypatch):
    """Each mapped file's vtables, demangled, are kept in the symbol cache
    under its build-id: the next scan reads them back instead of the file's
    symbols; an entry that is not what a scan writes is read afresh."""
    monkeypatch.setenv("UNREACHABLE_CACHE_DIR", str(tmp_path))
    target = _start(targets, True)
    first = _groups(scan(target.pid, ScanOptions()))
    entries = list(tmp_path.glob("symbols/v2/*/*-vtables/vtables.json"))
    own = [p for p in entries if "zoo::Fish" in p.read_text()]
    assert len(own) == 1 and len(entries) > 1, entries
    own[0].write_text(own[0].read_text().replace("zoo::Fish", "zoo::Kept"))
    kept = _groups(scan(target.pid, ScanOptions()))
    assert kept == {
        (size, kind.replace("zoo::Fish", "zoo::Kept")): n for (size, kind), n in first.items()
    }
    own[0].write_text('[[1, 2, "vtable for X", 3]]')
    assert _groups(scan(target.pid, ScanOptions())) == first
    assert "zoo::Fish" in own[0].read_text()


def test_backtraces_still_named(targets):
    """Entries with backtraces are folded by backtrace, and still named."""
    target = _start(targets, True, options="backtrace=16")
    report = scan(target.pid, ScanOptions())
    assert report.leak_count == target.int("leak_count")
    named = {e.type for e in report.leaks if e.backtrace}
    assert {"zoo::Fish", "Bird"} <= named


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("under_shim", [True, False], ids=["shim", "no-shim"])
def test_text_report_names_shows_contents_and_hints(targets, under_shim):
    target = _start(targets, under_shim)
    res = _cli("scan", str(target.pid))
    assert res.returncode == 1, res.stderr
    text = res.stdout
    assert "   type: zoo::Fish\n" in text and "   type: Bird\n" in text
    assert f"   and {48 if under_shim else 72} similar unreachable bytes in 3 allocations" in text
    # The largest entries without a backtrace show their first bytes unasked.
    assert text.count("bytes of contents:") + text.count("   contents:") == 4
    assert text.endswith(BACKTRACE_HINT + "\n\n")
    assert "backtrace=16" in BACKTRACE_HINT

    res = _cli("scan", str(target.pid), "--no-contents")
    assert res.returncode == 1, res.stderr
    assert "contents" not in res.stdout and "   type: Bird\n" in res.stdout

    res = _cli("scan", str(target.pid), "--json")
    doc = json.loads(res.stdout)
    assert sorted(e["type"] for e in doc["leaks"]) == ["", "", "Bird", "zoo::Fish"]
    assert not any("contents_hex" in e for e in doc["leaks"])

    res = _cli("scan", str(target.pid), "--contents", "--no-contents")
    assert res.returncode == 2 and "not allowed with" in res.stderr


def test_no_hint_with_backtraces(targets):
    target = _start(targets, True, options="backtrace=16")
    res = _cli("scan", str(target.pid))
    assert res.returncode == 1, res.stderr
    assert BACKTRACE_HINT not in res.stdout and "   type: Bird\n" in res.stdout


def test_types_cross_the_rpc(targets):
    """The gRPC reply carries each entry's type (--remote prints it)."""
    target = _start(targets, True)
    report = scan(target.pid, ScanOptions())
    back = report_to_model(report_from_dict(report_to_dict(report)))
    assert [e.type for e in back.leaks] == [e.type for e in report.leaks]
    assert {"zoo::Fish", "Bird"} <= {e.type for e in back.leaks}
