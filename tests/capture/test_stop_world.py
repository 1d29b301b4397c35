"""Stopping the world when the shim's helper has just been replaced or is
not there (unreachable/capture/stop_world.py): a helper steps aside for
unshare() and setns() (native/shim/namespaces.c), and a new one starts as
the call returns; a forked child starts one at its first allocation."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.support.tracking import copy_unsupported
from unreachable.capture.stop_world import stop_world
from unreachable.capture.target import open_target
from unreachable.errors import TargetUnscannable
from unreachable.scan import ScanOptions, scan

PROGRAM = Path(__file__).parent / "programs" / "helper_aside.c"


def _ask(target, command: str) -> None:
    target.send(command)
    assert target.read_line() == "DONE"


def _helper_tid(pid: int, not_this: int) -> int:
    """The helper's tid once one other than not_this runs."""
    for _ in range(200):
        if (tid := open_target(pid).header.helper_tid) not in (0, not_this):
            return tid
        time.sleep(0.01)
    raise AssertionError("no new helper")


def test_a_helper_replaced_since_the_descriptor_was_read(targets):
    """The stop reads the descriptor again and snapshots through the new one."""
    target = targets.start(PROGRAM)
    stale = open_target(target.pid)
    _ask(target, "aside")
    _helper_tid(target.pid, not_this=stale.header.helper_tid)
    modes = ["auto", "fork"] + ([] if copy_unsupported() else ["copy"])
    for mode in modes:
        with stop_world(stale, mode) as capture:
            snapshot, why = capture.snapshot, capture.snapshot_error
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
