"""A target that keeps memory out of forks (MADV_DONTFORK): its snapshot
child lacks that memory and the pointers in it, so a scan that forked is
taken again without a child (the report says why), and an explicit
`--snapshot fork` is refused in one line. node's V8 heap is such memory:
over 400 blocks were reported leaked in a fork snapshot, none when stopped."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.cli.test_scan_cli import assert_one_line_error
from unreachable.capture.kept_out_of_fork import kept_out_of_fork
from unreachable.process.maps import Mapping
from unreachable.scan import ScanOptions, scan

PROGRAMS = Path(__file__).parent.parent / "scan" / "programs"


def _exact(target, report) -> None:
    assert (report.leak_count, report.leak_bytes) == (
        target.int("leak_count"),
        target.int("leak_bytes"),
    ), [(hex(e.address), e.size) for e in report.leaks]


def test_auto_scans_without_a_child_and_says_why(targets):
    target = targets.start(PROGRAMS / "dontfork_page.c")
    report = scan(target.pid, ScanOptions())
    _exact(target, report)
    assert report.snapshot != "fork"
    assert "MADV_DONTFORK" in report.snapshot_note
    assert f"{int(target.info['page'], 16):#x}-" in report.snapshot_note
    assert target.alive() and target.tracer() == 0 and target.state() != "t"


def test_an_explicit_fork_is_refused(targets):
    target = targets.start(PROGRAMS / "dontfork_page.c")
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "unreachable.cli.main",
            "scan",
            str(target.pid),
            "--snapshot",
            "fork",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert_one_line_error(res, r"out of forks \(MADV_DONTFORK.*--snapshot stopped or copy")
    assert target.alive() and target.tracer() == 0 and target.state() != "t"


def test_stopped_needs_no_fork(targets):
    target = targets.start(PROGRAMS / "dontfork_page.c")
    report = scan(target.pid, ScanOptions(snapshot="stopped"))
    _exact(target, report)
    assert report.snapshot_note == ""


def test_only_the_targets_own_mappings_count():
    def m(start: int, end: int, perms: str = "rw-p", path: str = "") -> Mapping:
        return Mapping(start, end, perms, 0, 0, path)

    target = [
        m(0x1000, 0x2000),
        m(0x3000, 0x4000),
        m(0x5000, 0x6000, "---p"),
        m(0x7000, 0x8000, "r--p", "[vvar]"),
    ]
    child = [m(0x1000, 0x2000), m(0x9000, 0xA000)]  # the child's own stack: not the target's
    assert kept_out_of_fork(target, child) == [target[1]]
