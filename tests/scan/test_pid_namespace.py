"""A target in a pid namespace of its own, as in a container, scanned from
outside it: the shim records its helper thread by the namespace's tid, which
the scanner translates (process/status.py host_tid), so such targets get the
fork snapshot and the in-child sweep like any other, and the copy snapshot
with a heartbeat in place of the scanner's pid; exact verdicts, and nothing
left tracked when the scanner dies."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.scanner.procs import children, state, wait_until
from tests.support.cbuild import build
from tests.support.targets import wait_for_helper
from tests.support.tracking import copy_unsupported, kill_scanner_while_tracking, wait_untracked
from unreachable._paths import shim_path
from unreachable.process.status import pid_namespace, read_status
from unreachable.scan import ScanOptions, scan

PROGRAMS = Path(__file__).parent / "programs"

pytestmark = pytest.mark.skipif(shutil.which("unshare") is None, reason="no unshare(1)")


@contextmanager
def in_pid_namespace(program: str, *args: str) -> Iterator[tuple[int, dict[str, int]]]:
    """(the target's pid as seen from here, its READY values)."""
    exe = build(PROGRAMS / program)
    cmd = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"]
    cmd += ["env", f"LD_PRELOAD={shim_path()}", str(exe), *args]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()
        if not line.startswith("READY"):
            pytest.skip(f"cannot start a process in a new pid namespace here: {line!r}")
        info = {k: int(v, 0) for k, v in (kv.split("=", 1) for kv in line.split()[1:])}
        (pid,) = children(proc.pid)
        assert pid_namespace(pid) != pid_namespace("self")
        wait_for_helper(pid)  # READY may come before the helper records its tid
        yield pid, info
        assert state(pid) != "t" and read_status(pid).tracer_pid == 0
        wait_until(lambda: children(pid) == [], what="snapshot child gone")
    finally:
        proc.kill()
        proc.wait(timeout=10)


@pytest.mark.parametrize("program", ["thread_stack.c", "churn.c"])
def test_fork_snapshot_and_in_child_sweep_in_a_pid_namespace(program):
    with in_pid_namespace(program) as (pid, info):
        report = scan(pid, ScanOptions())
        assert (report.leak_count, report.leak_bytes) == (info["leak_count"], info["leak_bytes"])
        assert (report.snapshot, report.sweep) == ("fork", "child"), report.snapshot_note
        assert report.snapshot_note == "" and report.sweep_note == ""


@pytest.mark.skipif(bool(copy_unsupported()), reason=copy_unsupported())
def test_copy_snapshot_in_a_pid_namespace():
    """The helper cannot see the scanner's pid from inside: the scanner
    beats instead (abi.h ur_write_tracker.heartbeat)."""
    with in_pid_namespace("churn.c") as (pid, info):
        report = scan(pid, ScanOptions(snapshot="copy"))
        assert (report.leak_count, report.leak_bytes) == (info["leak_count"], info["leak_bytes"])
        assert report.snapshot == "copy"
        wait_untracked(pid)


@pytest.mark.skipif(bool(copy_unsupported()), reason=copy_unsupported())
def test_a_scanner_killed_while_copying_a_container_stops_the_tracking():
    """No pid to watch: the helper stops once the heartbeat has been still for
    UR_TRACK_HEARTBEAT_MS, and the target runs on as it was."""
    with in_pid_namespace("many.c", "600000", "300000") as (pid, info):
        kill_scanner_while_tracking(pid)
        wait_untracked(pid)
        report = scan(pid, ScanOptions(snapshot="copy"))
        assert (report.leak_count, report.leak_bytes) == (info["leak_count"], info["leak_bytes"])
