"""A seccomp allowlist the program puts on every thread with
SECCOMP_FILTER_FLAG_TSYNC confines the shim's helper too: it then makes
only futex calls, and a scan that would need it to make others fails with
one line instead of killing the process (native/shim/sandbox.c,
helper.c)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from unreachable.scan import ScanOptions, scan

PROGRAMS = Path(__file__).resolve().parent / "programs"
CLI = [sys.executable, "-m", "unreachable.cli.main"]
GIVE_BACK_PERIOD_S = 2.0  # the helper's periodic checks (give_back.h)


def _start(targets, *args: str):
    target = targets.start(PROGRAMS / "tsync_allowlist.c", *args)
    assert target.int("leak_count") == 1
    return target


def test_the_helper_under_the_programs_allowlist_does_not_kill_it(targets):
    """Its periodic checks read /proc (pread64 killed the process), and its
    start-up calls raced the filter (rseq, prctl)."""
    target = _start(targets)
    time.sleep(GIVE_BACK_PERIOD_S * 1.5)  # past one round of them: a wait, no timing asserted
    assert target.alive()
    target.send("alloc")
    assert target.read_line() == "ALLOCATED"


def test_a_stopped_scan_of_a_confined_process_is_exact(targets):
    """The scan's stop interrupted the helper's futex_waitv, which the
    kernel restarts under the filter, which kills on it."""
    target = _start(targets)
    report = scan(target.pid, ScanOptions(snapshot="stopped"))
    assert (report.leak_count, report.leak_bytes) == (1, 300)
    assert target.alive() and target.tracer() == 0
    target.send("alloc")
    assert target.read_line() == "ALLOCATED"


@pytest.mark.parametrize(
    ("snapshot", "allowed"),
    [("fork", ""), ("copy", ""), ("concurrent", ""), ("fork", "clone")],
)
def test_a_scan_the_confined_helper_cannot_serve_fails_with_one_line(targets, snapshot, allowed):
    """With clone allowed and wait4 not, the helper's snapshot was taken
    and its reaping of the child killed the process."""
    target = _start(targets, *([allowed] if allowed else []))
    res = subprocess.run(
        [*CLI, "scan", str(target.pid), "--snapshot", snapshot],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 2, res.stdout
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "seccomp" in lines[0], lines
    assert target.alive() and target.tracer() == 0
    target.send("alloc")
    assert target.read_line() == "ALLOCATED"
