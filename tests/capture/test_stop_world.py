"""Stopping the world when the shim's helper has just been replaced or is
not there (unreachable/capture/stop_world.py): a helper steps aside for
unshare() and setns() (native/shim/namespaces.c), and a new one starts as
the call returns; a forked child starts one at its first allocation."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.support.plans import first_capture
from tests.support.targets import wait_state
from tests.support.tracking import copy_unsupported
from unreachable.capture.target import open_target
from unreachable.errors import TargetUnscannable
from unreachable.scan import ScanOptions, scan

PROGRAM = Path(__file__).parent / "programs" / "helper_aside.c"
PROGRAMS = Path(__file__).parent.parent / "scan" / "programs"


def _ask(target, command: str) -> None:
    target.send(command)
    assert target.read_line() == "DONE"


def _helper_tid(pid: int, not_this: int) -> int:
    """The helper's tid once one other than not_this runs."""
    deadline = time.monotonic() + 20
    while (tid := open_target(pid).header.helper_tid) in (0, not_this):
        assert time.monotonic() < deadline, "no new helper"
        time.sleep(0.002)
    return tid


def test_a_helper_replaced_since_the_descriptor_was_read(targets):
    """The stop reads the descriptor again and snapshots through the new one."""
    target = targets.start(PROGRAM)
    stale = open_target(target.pid)
    _ask(target, "aside")
    _helper_tid(target.pid, not_this=stale.header.helper_tid)
    modes = ["auto", "fork"] + ([] if copy_unsupported() else ["copy"])
    for mode in modes:
        with first_capture(target.pid, mode, target=stale) as (capture, why):
            snapshot = capture.snapshot
        assert snapshot == ("copy" if mode == "copy" else "fork"), why
    assert target.alive() and target.tracer() == 0


def test_a_process_without_a_helper(targets):
    """A forked child that has not allocated yet has started none."""
    parent = targets.start(PROGRAM)
    parent.send("fork")
    child = int(parent.read_line())
    assert open_target(child).header.helper_tid == 0
    report = scan(child, ScanOptions())
    assert (report.snapshot, report.leak_count, report.leak_bytes) == ("stopped", 1, 24)
    assert report.snapshot_note == "the shim's snapshot helper thread is not running"
    with pytest.raises(TargetUnscannable, match="helper thread is not running"):
        scan(child, ScanOptions(snapshot="fork"))


def test_a_new_helper_as_the_call_returns(targets):
    """No allocation needed: an idle program keeps fork snapshots."""
    target = targets.start(PROGRAM)
    old = open_target(target.pid).header.helper_tid
    _ask(target, "aside")
    new = _helper_tid(target.pid, not_this=old)
    assert os.path.exists(f"/proc/{target.pid}/task/{new}")
    assert not os.path.exists(f"/proc/{target.pid}/task/{old}")
    report = scan(target.pid, ScanOptions(snapshot="fork"))
    assert (report.snapshot, report.leak_count, report.leak_bytes) == ("fork", 1, 24)


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry))
        except (OSError, ValueError):
            continue
    return found


def test_a_user_stopped_target_keeps_no_snapshot_child(targets):
    """Stopped by SIGSTOP, its helper cannot reap the snapshot child: the
    scan runs the helper alone until it has, so that no zombie stays behind
    and the next fork scan does not find the helper busy."""
    target = targets.start(PROGRAMS / "globals.c")
    os.kill(target.pid, signal.SIGSTOP)
    wait_state(target, "T")
    try:
        for mode in ("fork", "fork", "auto"):
            report = scan(target.pid, ScanOptions(snapshot=mode))
            assert (report.snapshot, report.snapshot_note) == ("fork", "")
            assert (report.leak_count, report.leak_bytes) == (1, 300)
            assert _children(target.pid) == []
            assert target.state() == "T" and target.tracer() == 0
    finally:
        os.kill(target.pid, signal.SIGCONT)
    wait_state(target, "SR")
