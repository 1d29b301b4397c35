"""Copy snapshots of processes that can no longer open /proc themselves:
the shim's helper reads its own maps to write-protect them, through the
descriptor the shim kept open from the start (native/shim/self_maps.c)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.targets import wait_for_helper
from tests.support.tracking import copy_unsupported, wait_untracked, write_protected
from unreachable.capture import copy_snapshot
from unreachable.errors import TargetUnscannable
from unreachable.process.status import read_status
from unreachable.scan import ScanOptions, scan

PROGRAM = Path(__file__).parent / "programs" / "no_proc.c"

pytestmark = [
    pytest.mark.skipif(bool(copy_unsupported()), reason=copy_unsupported()),
    pytest.mark.skipif(os.geteuid() != 0, reason="chroot and mount namespaces take root"),
]


@pytest.mark.parametrize("how", ["chroot", "unmount"])
def test_copy_of_a_process_without_proc(targets, tmp_path, how):
    target = targets.start(PROGRAM, how, str(tmp_path))
    assert not os.path.lexists(f"/proc/{target.pid}/root/proc/self")
    report = scan(target.pid, ScanOptions(snapshot="copy"))
    assert report.snapshot == "copy" and report.snapshot_note == ""
    assert (report.leak_count, report.leak_bytes) == (1, 4444)
    wait_untracked(target.pid)
    assert target.alive() and target.tracer() == 0


def test_the_real_reason_when_the_kept_maps_were_closed(targets, tmp_path):
    """A daemon that closes every descriptor after its chroot closes the
    shim's: the classic copy, whose helper reads its own maps, is refused
    for that, and auto forks. A copy-on-write snapshot, whose mappings the
    scanner registers, needs no maps of the helper's."""
    target = targets.start(PROGRAM, "chroot", str(tmp_path), "closeall")
    report = scan(target.pid, ScanOptions(snapshot="copy"))
    assert report.snapshot == "copy" and (report.leak_count, report.leak_bytes) == (1, 4444)
    copy_snapshot._classic_next.add(target.pid)
    with pytest.raises(TargetUnscannable, match="chrooted.*closed the descriptor"):
        scan(target.pid, ScanOptions(snapshot="copy"))
    report = scan(target.pid, ScanOptions())
    assert report.snapshot == "fork" and (report.leak_count, report.leak_bytes) == (1, 4444)
    assert not write_protected(target.pid)


@pytest.mark.parametrize("mode", ["classic", "copy", "concurrent"])
def test_a_child_chrooted_before_its_first_allocation(targets, tmp_path, mode):
    """lldpd's privilege-separated child chroots as soon as it is forked,
    before its first allocation starts its own helper: the maps the shim
    keeps are the child's, opened as it was forked, not as its helper
    started (which was in the chroot)."""
    target = targets.start(PROGRAM, "forkchroot", str(tmp_path))
    child = target.int("child")
    wait_for_helper(child)
    assert not os.path.lexists(f"/proc/{child}/root/proc/self")
    if mode == "classic":
        copy_snapshot._classic_next.add(child)
    snapshot = "copy" if mode == "classic" else mode
    report = scan(child, ScanOptions(snapshot=snapshot))
    assert report.snapshot == snapshot  # a concurrent scan's note lists its stops
    assert (report.leak_count, report.leak_bytes) == (1, 4444)
    wait_untracked(child)
    assert read_status(child).state in "SR" and read_status(child).tracer_pid == 0
