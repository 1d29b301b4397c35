"""Targets under a seccomp filter: the scanner reads the shim helper's
filters (PTRACE_SECCOMP_GET_FILTER, which takes CAP_SYS_ADMIN) and forks a
snapshot only when they provably let the helper's clone() through; otherwise
it sweeps the stopped target. Never is the helper asked to make a call its
filter would kill it for."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import pytest

from unreachable.errors import TargetUnscannable
from unreachable.process.status import thread_seccomp
from unreachable.scan import ScanOptions, scan

PROGRAMS = Path(__file__).parent / "programs"

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="reading seccomp filters takes CAP_SYS_ADMIN"
)


def _exact(target, report) -> None:
    assert (report.leak_count, report.leak_bytes) == (
        target.int("leak_count"),
        target.int("leak_bytes"),
    )


@pytest.mark.parametrize(
    ("variant", "snapshot"),
    [("errno-uname", "fork"), ("kill-clone", "stopped"), ("reads-ip", "stopped")],
)
def test_fork_only_when_the_filter_lets_the_clone_through(targets, variant, snapshot):
    target = targets.start(PROGRAMS / "seccomp_filter.c", variant)
    report = scan(target.pid, ScanOptions())
    _exact(target, report)
    assert report.snapshot == snapshot
    # Why it did not fork, for the CLI's note; nothing when it did.
    assert ("seccomp" in report.snapshot_note) == (snapshot == "stopped"), report.snapshot_note
    assert target.alive() and target.tracer() == 0 and target.state() != "t"


def _libseccomp() -> bool:
    try:
        ctypes.CDLL("libseccomp.so.2")
    except OSError:
        return False
    return True


@pytest.mark.skipif(not _libseccomp(), reason="no libseccomp.so.2 to compile filters with")
@pytest.mark.parametrize(
    ("variant", "snapshot"), [("lib-newuser", "fork"), ("lib-fork", "stopped")]
)
def test_filters_compiled_by_libseccomp(targets, variant, snapshot):
    """Filters as systemd's SystemCallFilter= makes them: libseccomp's arch and
    x32 checks, 64-bit argument comparisons split into halves."""
    target = targets.start(PROGRAMS / "seccomp_filter.c", variant)
    report = scan(target.pid, ScanOptions())
    _exact(target, report)
    assert report.snapshot == snapshot
    assert target.alive() and target.tracer() == 0 and target.state() != "t"


def test_asking_for_fork_under_a_killing_filter_is_refused(targets):
    target = targets.start(PROGRAMS / "seccomp_filter.c", "kill-clone")
    with pytest.raises(TargetUnscannable, match="seccomp filter does not provably allow"):
        scan(target.pid, ScanOptions(snapshot="fork"))
    assert target.alive() and target.tracer() == 0 and target.state() != "t"
    # The filter is on every thread, the helper's too.
    assert all(
        thread_seccomp(target.pid, int(t)) == 2 for t in os.listdir(f"/proc/{target.pid}/task")
    )
