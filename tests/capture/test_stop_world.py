"""Stopping the world when the shim's helper is gone or has just gone
(unreachable/capture/stop_world.py): a helper steps aside for unshare() and
setns() (native/shim/namespaces.c) and comes back with the next allocation."""

from __future__ import annotations

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


def _wait_for_helper(pid: int) -> None:
    for _ in range(200):
        if open_target(pid).header.helper_tid:
            return
        time.sleep(0.01)
    raise AssertionError("the helper did not come back")


def test_a_helper_gone_since_the_descriptor_was_read(targets):
    target = targets.start(PROGRAM)
    stale = open_target(target.pid)
    assert stale.header.helper_tid
    _ask(target, "aside")
    with stop_world(stale, "auto") as capture:
        assert capture.snapshot == "stopped"
        assert capture.snapshot_error == "the shim's snapshot helper thread ended before the stop"
    with pytest.raises(TargetUnscannable, match="helper thread ended before the stop"):
        with stop_world(stale, "fork"):
            pass
    if not copy_unsupported():
        with pytest.raises(TargetUnscannable, match="no copy snapshot: the shim's helper thread"):
            with stop_world(stale, "copy"):
                pass
    assert target.alive() and target.tracer() == 0


def test_scans_without_a_helper_and_after_it_comes_back(targets):
    target = targets.start(PROGRAM)
    _ask(target, "aside")
    assert open_target(target.pid).header.helper_tid == 0
    report = scan(target.pid, ScanOptions())
    assert (report.snapshot, report.leak_count, report.leak_bytes) == ("stopped", 1, 24)
    assert report.snapshot_note == "the shim's snapshot helper thread is not running"
    _ask(target, "alloc")
    _wait_for_helper(target.pid)
    report = scan(target.pid, ScanOptions(snapshot="fork"))
    assert (report.snapshot, report.leak_count, report.leak_bytes) == ("fork", 1, 24)
