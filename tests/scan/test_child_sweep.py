"""The in-child sweep (abi.h ur_child_box): the snapshot child marks and
folds its own memory. It must actually be used, give the outside sweep's exact
result, fall back to the outside sweep whatever fails, and never leave the
target stopped, traced or changed, even when the scanner dies mid-sweep."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from tests.scanner.procs import children, exists, read_u32, read_u64, state, wait_until
from tests.support.cbuild import REPO_DIR
from unreachable import _native
from unreachable.capture.descriptor import locate_shim, read_descriptor_header
from unreachable.capture.target import open_target
from unreachable.process.maps import read_maps
from unreachable.report.json_report import format_json
from unreachable.scan import ScanOptions, scan
from unreachable.sweep import child as child_mod
from unreachable.sweep.child import ChildSweepFailed

PROGRAMS = Path(__file__).parent / "programs"


def _exact(target, report) -> None:
    assert (report.leak_count, report.leak_bytes) == (
        target.int("leak_count"),
        target.int("leak_bytes"),
    )


def _released(target) -> None:
    pid = target.pid
    wait_until(lambda: children(pid) == [], what="snapshot child gone")
    assert target.alive() and target.tracer() == 0
    assert target.state() != "t"


def test_in_child_sweep_is_used_and_reported(targets):
    target = targets.start(PROGRAMS / "many.c", "20000", "5000")
    report = scan(target.pid, ScanOptions())
    _exact(target, report)
    assert report.snapshot == "fork" and report.sweep == "child"
    assert report.sweep_note == ""
    assert json.loads(format_json(report))["sweep"] == "child"
    outside = scan(target.pid, ScanOptions(sweep="scanner"))
    assert outside.sweep == "scanner"
    assert [(e.address, e.size, e.referenced_count) for e in report.leaks] == [
        (e.address, e.size, e.referenced_count) for e in outside.leaks
    ]
    assert (report.allocation_count, report.allocation_bytes) == (
        outside.allocation_count,
        outside.allocation_bytes,
    )
    _released(target)


def test_a_marking_team_gives_one_threads_result(targets):
    """Several threads mark the child's heap (abi.h ur_child_sweep_opts): the
    same leaks, to the byte, as one thread, and both exact."""
    target = targets.start(PROGRAMS / "many.c", "200000", "50000")
    one = scan(target.pid, ScanOptions(mark_threads=1))
    team = scan(target.pid, ScanOptions(mark_threads=4))
    _exact(target, one)
    _exact(target, team)
    assert one.sweep == team.sweep == "child"
    assert [(e.address, e.size, e.referenced_count, e.referenced_size) for e in team.leaks] == [
        (e.address, e.size, e.referenced_count, e.referenced_size) for e in one.leaks
    ]
    # The child reports the team that ran: no more than the CPUs the target may use.
    cpus = len(os.sched_getaffinity(target.pid))
    assert (one.mark_threads, team.mark_threads) == (1, min(4, cpus))
    _released(target)


def _autogroup(pid: int) -> str:
    """The process's autogroup; "" for the root group, whose file is empty
    (every process that never called setsid, as in many containers), or on a
    kernel without autogroups."""
    try:
        return next(iter(Path(f"/proc/{pid}/autogroup").read_text().split()), "")
    except OSError:
        return ""


def test_the_sweeping_child_has_a_session_of_its_own(targets):
    """The child that sweeps leaves the target's session, and so its
    autogroup (docs/pause.md, "CPU share"): the kernel shares the CPU between
    the two as groups, not thread by thread, where a busy target's threads
    would outnumber the marking team."""
    target = targets.start(PROGRAMS / "many.c", "20000", "5000")
    seen: list[tuple[int, int, str]] = []

    def look(now: str) -> None:
        if now == "allocations":  # the child indexed, stopped for the scanner
            seen.extend((c, os.getsid(c), _autogroup(c)) for c in children(target.pid))

    report = scan(target.pid, ScanOptions(), progress=look)
    _exact(target, report)
    assert report.sweep == "child"
    assert len(seen) == 1
    child, session, autogroup = seen[0]
    assert session == child != os.getsid(target.pid)
    if autogroup:
        assert autogroup != _autogroup(target.pid)
    _released(target)


def test_back_to_back_fork_scans_find_the_helper_free(targets):
    """The swept child is detached with SIGKILL in place of its own SIGSTOP
    and left to the target's helper to reap, the scanner not waiting for
    its exit: the next fork scan, at once, may find the helper still
    waiting for it, waits for it before it stops the target
    (capture/helper_free.py), and forks again; none is left after."""
    target = targets.start(PROGRAMS / "many.c", "200000", "50000")
    for _ in range(5):
        report = scan(target.pid, ScanOptions(snapshot="fork"))
        _exact(target, report)
        assert (report.sweep, report.snapshot_note, report.sweep_note) == ("child", "", "")
    _released(target)


def _sleeps(tid: int) -> int:
    """The times a thread of this process gave up its core (each of its
    polling loop's sleeps is one)."""
    for line in Path(f"/proc/self/task/{tid}/status").read_text().splitlines():
        if line.startswith("voluntary_ctxt_switches:"):
            return int(line.split()[1])
    raise AssertionError("no voluntary_ctxt_switches")


def test_waiting_for_the_child_looks_at_most_every_millisecond(targets):
    """The scanner polls for the child's stops (a hung child cannot hang
    it); for the length of a sweep it looks at most every millisecond, not
    every 0.2 ms as for a thread's stop in the pause: each look is CPU the
    target and the child do not get (docs/pause.md, "CPU share"). Counted
    as the waiting thread's sleeps against the wait's length, an upper
    bound that a loaded machine, whose sleeps overrun, only loosens."""
    target = targets.start(PROGRAMS / "many.c", "2000000", "500000")
    t = open_target(target.pid)
    tid = threading.get_native_id()
    with _native.Session(t.pid) as s:
        s.stop()
        s.snapshot(t.header.helper_tid, t.header.helper_cmd)
        s.release()
        s.child_start(t.header.child_box)
        before, t0 = _sleeps(tid), time.monotonic()
        s.child_wait(600)  # the child's index, built of 2M allocations
        waited_ms = (time.monotonic() - t0) * 1000
        looks = _sleeps(tid) - before
    # The sleeps double from 2 us up to the longest: 10 before it is reached.
    assert looks <= waited_ms + 20, (looks, waited_ms)
    _released(target)


def _smaps_entry(pid: int, addr: int) -> dict[str, str]:
    """The /proc/PID/smaps fields of the mapping that holds addr."""
    entry: dict[str, str] = {}
    holds = False
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        first, _, rest = line.partition(" ")
        if not first.endswith(":") and "-" in first:
            if holds:
                break
            start, end = (int(x, 16) for x in first.split("-"))
            holds = start <= addr < end
        elif holds:
            entry[first.rstrip(":")] = rest.strip()
    assert entry, f"no mapping holds {addr:#x}"
    return entry


def test_a_request_faults_in_small_pages_of_the_childs_inbox(targets):
    """The scanner writes each request into the child's inbox through
    /proc/PID/mem, a few KiB at a time: the inbox is reserved in small pages
    (not huge-page advised), so that write faults in 4 KiB, where a huge
    page made the first write of a scan zero 2 MiB in the scanner's time
    (native/mark/alloc.h ur_small_reserve)."""
    target = targets.start(PROGRAMS / "many.c", "20000", "5000")
    t = open_target(target.pid)
    with _native.Session(t.pid) as s:
        s.stop()
        child = s.snapshot(t.header.helper_tid, t.header.helper_cmd)
        s.release()
        sweeper = child_mod.ChildSweeper(s, t.header.child_box)
        assert sweeper.holds([(0, 4096)]) == [False]
        # abi.h struct ur_child_box: the inbox's address and capacity at 16 and 24.
        addr, cap = (read_u64(child, t.header.child_box + at) for at in (16, 24))
        assert addr and cap
        inbox = _smaps_entry(child, addr)
    flags = inbox["VmFlags"].split()
    assert "hg" not in flags and "nh" in flags, flags
    assert inbox["AnonHugePages"] == "0 kB"
    _released(target)


def test_child_failure_falls_back_to_sweeping_the_same_child(targets, monkeypatch):
    """A step the child reports as failed leaves it frozen: swept from outside."""

    def failing(*_args: object, **_kw: object) -> None:
        raise ChildSweepFailed("injected failure", frozen=True)

    monkeypatch.setattr("unreachable.scan.mark.sweep_in_child", failing)
    target = targets.start(PROGRAMS / "many.c", "20000", "5000")
    report = scan(target.pid, ScanOptions())
    _exact(target, report)
    assert report.snapshot == "fork" and report.sweep == "scanner"
    assert "injected" in report.sweep_note
    with pytest.raises(Exception, match="injected"):
        scan(target.pid, ScanOptions(sweep="child"))
    _released(target)


@pytest.mark.parametrize("stage", ["captured", "allocations"])
def test_child_killed_falls_back_to_a_new_snapshot(targets, stage):
    target = targets.start(PROGRAMS / "many.c", "20000", "5000")
    killed: list[int] = []

    def kill_child(now: str) -> None:
        # "captured": frozen at birth; "allocations": indexed, answered, stopped.
        if now == stage and not killed:
            for c in children(target.pid):
                os.kill(c, signal.SIGKILL)
                killed.append(c)

    report = scan(target.pid, ScanOptions(), progress=kill_child)
    assert killed
    _exact(target, report)
    assert report.snapshot == "fork" and report.sweep == "scanner"
    assert report.sweep_note
    _released(target)


def test_child_timeout_is_interrupted_and_swept_from_outside(targets, monkeypatch):
    monkeypatch.setattr(child_mod, "DEFAULT_TIMEOUT_S", 1e-6)
    target = targets.start(PROGRAMS / "many.c", "200000", "50000")
    report = scan(target.pid, ScanOptions())
    _exact(target, report)
    assert report.sweep in ("child", "scanner")  # the child may beat a 1 us deadline
    if report.sweep == "scanner":
        assert "did not finish" in report.sweep_note
    _released(target)


SCANNER = textwrap.dedent(
    """
    import sys, time
    sys.path.insert(0, sys.argv[2])
    from unreachable import _native
    from unreachable.capture.target import open_target
    t = open_target(int(sys.argv[1]))
    s = _native.Session(t.pid)
    s.stop()
    child = s.snapshot(t.header.helper_tid, t.header.helper_cmd)
    s.release()
    s.child_start(t.header.child_box)
    print(child, flush=True)
    time.sleep(600)
    """
)


def test_scanner_killed_while_the_child_sweeps(targets):
    """PTRACE_O_EXITKILL: the sweeping child dies with its scanner; the target
    is released, untraced, and scans again exactly."""
    target = targets.start(PROGRAMS / "many.c", "2000000", "500000")
    pid = target.pid
    shim = locate_shim(pid, read_maps(pid))
    header = read_descriptor_header(pid, shim.descriptor_addr)
    proc = subprocess.Popen(
        [sys.executable, "-c", SCANNER, str(pid), str(REPO_DIR)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        child = int(proc.stdout.readline())
        assert child in children(pid)
        assert state(child) != "t" or exists(child)  # indexing (or already stopped)
    finally:
        proc.kill()
        proc.wait()
    wait_until(lambda: not exists(child), what="child killed with its tracer")
    _released(target)
    wait_until(lambda: read_u32(pid, header.helper_cmd) == 0, what="helper back to IDLE")
    report = scan(pid, ScanOptions(sweep="child"))
    _exact(target, report)
    assert report.sweep == "child"
    _released(target)
