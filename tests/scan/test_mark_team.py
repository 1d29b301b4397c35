"""The marking team's size where the target runs during the mark
(docs/pause.md, "What the target feels"): the cores its busy threads leave
free, at least one, so that no marking thread takes a core one of the
target's threads needs; a stopped scan keeps the whole team. The report
says the team that marked (mark_threads)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from unreachable.capture.target import open_target
from unreachable.scan import ScanOptions, scan
from unreachable.scan.facts import gather_facts
from unreachable.sweep.child import busy_threads, default_mark_threads

PROGRAM = Path(__file__).parent / "programs" / "busy_threads.c"


def _exact(target, report) -> None:
    assert (report.leak_count, report.leak_bytes) == (
        target.int("leak_count"),
        target.int("leak_bytes"),
    )


def test_busy_threads_counts_the_threads_that_want_a_cpu(targets):
    idle = targets.start(PROGRAM, "0")
    busy = targets.start(PROGRAM, "3")
    # The shim's helper is left out as the scan leaves it out: its work is the scan's.
    helper = open_target(busy.pid).header.helper_tid
    assert busy_threads(idle.pid, skip=[open_target(idle.pid).header.helper_tid]) == 0
    assert busy_threads(busy.pid, skip=[helper]) == 3
    spinners = sorted(int(t) for t in os.listdir(f"/proc/{busy.pid}/task"))
    spinners = [t for t in spinners if t not in (busy.pid, helper)]
    assert busy_threads(busy.pid, skip=[helper, spinners[0]]) == 2


@pytest.mark.parametrize("snapshot", ["copy", "fork", "concurrent"])
def test_a_mark_beside_a_busy_target_leaves_it_its_cores(targets, snapshot):
    cpus = len(os.sched_getaffinity(0))
    whole = default_mark_threads()
    idle = targets.start(PROGRAM, "0")
    busy = targets.start(PROGRAM, str(cpus))
    teams = []
    for target in (idle, busy):
        report = scan(target.pid, ScanOptions(snapshot=snapshot))
        assert report.snapshot == snapshot
        _exact(target, report)
        teams.append(report.mark_threads)
    # Idle: the whole team; every core busy: one thread.
    assert teams == [whole, 1]
    # The user's team is the user's.
    asked = scan(busy.pid, ScanOptions(snapshot=snapshot, mark_threads=whole))
    assert asked.mark_threads == whole


def test_a_stopped_scan_keeps_the_whole_team(targets):
    busy = targets.start(PROGRAM, str(len(os.sched_getaffinity(0))))
    report = scan(busy.pid, ScanOptions(snapshot="stopped"))
    _exact(busy, report)
    assert report.mark_threads == default_mark_threads()


def test_the_busy_threads_are_counted_before_any_snapshot(targets):
    """Counted with the facts, before a copy-on-write copy's protection
    can hold a writing thread in a fault (which would look idle then),
    wherever the scan runs beside the target: for the marking team, and
    with a named team for where a copy's or a concurrent mark's end runs
    (beside the scan only with a core to spare)."""
    cpus = len(os.sched_getaffinity(0))
    busy = targets.start(PROGRAM, str(cpus))
    for snapshot in ("copy", "fork", "concurrent", "auto"):
        assert gather_facts(busy.pid, ScanOptions(snapshot=snapshot)).busy_threads == cpus
    assert gather_facts(busy.pid, ScanOptions(snapshot="stopped")).busy_threads is None
    named = ScanOptions(snapshot="copy", mark_threads=1)
    assert gather_facts(busy.pid, named).busy_threads == cpus
