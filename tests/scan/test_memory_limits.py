"""Memory limits (process/cgroup_memory.py). A target near its memory
cgroup's limit: a snapshot child is charged to that cgroup, so the scan
sweeps the child from outside when the child's scratch would not fit, takes
no child at all when even the child would not, and says so; the target is
never pushed into the OOM killer and each report stays exact. A scanner
under a limit of its own (a daemon with MemoryMax=) copies no more of a
target than its room allows, rather than being OOM-killed mid-scan."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.scanner.procs import children, wait_until
from tests.support.cgroups import MemoryCgroup, memory_cgroup
from tests.support.tracking import copy_unsupported
from unreachable.process.cgroup_memory import (
    FORK_MARGIN,
    child_sweep_charge,
    fork_charge,
    memory_headroom,
    oom_victim_first,
)
from unreachable.process.status import resident_anonymous_bytes
from unreachable.report.json_report import format_json
from unreachable.rpc.convert import report_from_dict, report_to_model
from unreachable.scan import ScanOptions, scan

PROGRAMS = Path(__file__).parent / "programs"
LIVE, LEAKED = 300_000, 100_000
MIB = 1 << 20


@pytest.fixture
def cgroup():
    with memory_cgroup("ur-limits") as cg:
        if cg is None:
            pytest.skip("no cgroup v1 memory hierarchy to make a cgroup in here")
        yield cg


def _start(targets, cg: MemoryCgroup):
    return targets.start(PROGRAMS / "many.c", str(LIVE), str(LEAKED), preexec=cg.enter)


def _leave_room(cg: MemoryCgroup, pid: int, room: int) -> None:
    """Set the limit so that the scan will see `room` bytes of headroom."""
    cg.limit(cg.usage() + room)
    seen = memory_headroom(pid)
    assert seen is not None, "the limit is not seen through /proc/PID/cgroup"
    cg.limit(cg.usage() + room - (seen - room))
    seen = memory_headroom(pid)
    assert seen is not None and abs(seen - room) < 2 * MIB, (seen, room)


def _scanner_in(cg: MemoryCgroup, pid: int) -> Callable[..., subprocess.CompletedProcess[str]]:
    """The CLI scanning pid from inside the cgroup cg."""

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "unreachable.cli.main", "scan", str(pid), *args]
        return subprocess.run(cmd, preexec_fn=cg.enter, capture_output=True, text=True)

    return cli


def _exact_and_released(target, report) -> None:
    assert (report.leak_count, report.leak_bytes) == (
        target.int("leak_count"),
        target.int("leak_bytes"),
    )
    wait_until(lambda: children(target.pid) == [], what="snapshot child gone")
    assert target.alive() and target.tracer() == 0 and target.state() != "t"


def test_a_generous_limit_changes_nothing(targets, cgroup):
    target = _start(targets, cgroup)
    _leave_room(cgroup, target.pid, 1024 * MIB)
    report = scan(target.pid, ScanOptions())
    assert (report.snapshot, report.sweep) == ("fork", "child")
    assert report.snapshot_note == "" and report.sweep_note == ""
    _exact_and_released(target, report)


def test_no_room_for_the_child_sweep_sweeps_the_child_from_outside(targets, cgroup):
    target = _start(targets, cgroup)
    fork_needs = fork_charge(resident_anonymous_bytes(target.pid))
    child_needs = child_sweep_charge(LIVE + LEAKED)
    # Room for the snapshot child, not for its scratch as well.
    _leave_room(cgroup, target.pid, fork_needs + child_needs // 2)
    report = scan(target.pid, ScanOptions())
    assert (report.snapshot, report.sweep) == ("fork", "scanner")
    assert "memory cgroup" in report.sweep_note, report.sweep_note
    assert report.snapshot_note == ""
    # As the CLI's --json and the daemon's proto carry it.
    doc = json.loads(format_json(report))
    assert doc["sweep_note"] == report.sweep_note
    assert report_to_model(report_from_dict(doc)).sweep_note == report.sweep_note
    _exact_and_released(target, report)


def test_memory_kept_out_of_forks_counts_against_the_child_sweep(targets, cgroup):
    """What a target keeps out of forks is read in the pause, and its words
    that may point into the heap go to the snapshot child as root values,
    into memory charged to the target's cgroup: 64 MiB of them with room
    for the child and its scratch but not for them as well: swept from
    outside; with room for them: in the child. The same 64 MiB holding no
    such word leaves the child its room."""
    target = targets.start(PROGRAMS / "dontfork_page.c", "64", "pointers", preexec=cgroup.enter)
    kept_out = 64 * MIB
    base = fork_charge(resident_anonymous_bytes(target.pid)) + child_sweep_charge(100)
    for room, sweep in ((base + kept_out // 2, "scanner"), (base + 2 * kept_out, "child")):
        _leave_room(cgroup, target.pid, room)
        report = scan(target.pid, ScanOptions(snapshot="fork"))
        assert (report.snapshot, report.sweep) == ("fork", sweep), report.sweep_note
        assert report.roots["kept out of fork"] > kept_out
        assert ("memory cgroup" in report.sweep_note) == (sweep == "scanner"), report.sweep_note
        _exact_and_released(target, report)
    plain = targets.start(PROGRAMS / "dontfork_page.c", "64", preexec=cgroup.enter)
    _leave_room(cgroup, plain.pid, base + kept_out // 2)
    report = scan(plain.pid, ScanOptions(snapshot="fork"))
    assert (report.snapshot, report.sweep) == ("fork", "child"), report.sweep_note
    _exact_and_released(plain, report)
    assert cgroup.oom_kills() == 0


def test_no_room_for_a_snapshot_child_sweeps_stopped(targets, cgroup):
    target = _start(targets, cgroup)
    _leave_room(cgroup, target.pid, FORK_MARGIN // 2)
    report = scan(target.pid, ScanOptions())
    assert (report.snapshot, report.sweep) == ("stopped", "scanner")
    assert "memory cgroup" in report.snapshot_note, report.snapshot_note
    _exact_and_released(target, report)


def test_an_explicit_fork_is_kept_but_not_swept_inside(targets, cgroup):
    target = _start(targets, cgroup)
    _leave_room(cgroup, target.pid, FORK_MARGIN // 2)
    report = scan(target.pid, ScanOptions(snapshot="fork"))
    assert (report.snapshot, report.sweep) == ("fork", "scanner")
    assert "memory cgroup" in report.sweep_note, report.sweep_note
    _exact_and_released(target, report)


def test_the_snapshot_child_is_the_oom_killers_first_choice():
    proc = subprocess.Popen(["sleep", "30"])
    try:
        with open(f"/proc/{proc.pid}/oom_score_adj") as f:
            assert f.read().strip() != "1000"
        oom_victim_first(proc.pid)
        with open(f"/proc/{proc.pid}/oom_score_adj") as f:
            assert f.read().strip() == "1000"
    finally:
        proc.kill()
        proc.wait()


def test_a_scanner_under_a_limit_copies_no_more_than_its_room(targets):
    """big_heap.c holds 200 MiB; the scanner runs in a cgroup of 160 MiB.
    Without the budget both copying modes had the scanner OOM-killed. A copy
    snapshot copies only the pages written during the scan (copy-on-write):
    it fits."""
    target = targets.start(PROGRAMS / "big_heap.c", "200", str(64 * 1024))
    with memory_cgroup("ur-scanner") as cg:
        if cg is None:
            pytest.skip("no cgroup v1 memory hierarchy to make a cgroup in here")
        cg.limit(160 * MIB)
        cli = _scanner_in(cg, target.pid)

        stopped = cli("--snapshot", "stopped", "--json")
        assert stopped.returncode == 1, stopped.stderr
        doc = json.loads(stopped.stdout)
        assert (doc["leak_count"], doc["leak_bytes"]) == (
            target.int("leak_count"),
            target.int("leak_bytes"),
        )
        if not copy_unsupported():
            copy = cli("--snapshot", "copy", "--json")
            assert copy.returncode == 1, copy.stderr
            doc = json.loads(copy.stdout)
            assert doc["snapshot"] == "copy" and (doc["leak_count"], doc["leak_bytes"]) == (
                target.int("leak_count"),
                target.int("leak_bytes"),
            )
        assert cg.oom_kills() == 0
    assert target.alive() and target.tracer() == 0 and target.state() != "t"


def test_a_scanner_without_room_for_the_sweep_refuses_it(targets):
    """400k allocations swept from outside take the scanner ~65 MiB; in a
    cgroup of 64 MiB (its interpreter takes ~30) it was OOM-killed mid-scan,
    and under systemd's default OOMPolicy= that stops the daemon it runs in.
    Now it refuses before the sweep allocates: exit 2, one line, the target
    as it was. With room (the snapshot child sweeps itself), the same
    scanner scans it."""
    target = targets.start(PROGRAMS / "many.c", str(LIVE), str(LEAKED))
    with memory_cgroup("ur-scanner-sweep") as cg:
        if cg is None:
            pytest.skip("no cgroup v1 memory hierarchy to make a cgroup in here")
        cg.limit(64 * MIB)
        cli = _scanner_in(cg, target.pid)

        for mode in ("stopped", "fork"):
            res = cli("--snapshot", mode, "--sweep", "scanner")
            assert res.returncode == 2, (mode, res.returncode, res.stderr)
            assert res.stderr.count("\n") == 1, res.stderr
            assert "memory cgroup" in res.stderr, res.stderr
            counted = re.search(r"sweeping (\d+) allocations", res.stderr)
            assert counted and int(counted.group(1)) >= LIVE + LEAKED, res.stderr
            wait_until(lambda: children(target.pid) == [], what="snapshot child gone")
            assert target.alive() and target.tracer() == 0 and target.state() != "t"
        in_child = cli("--json")
        assert in_child.returncode == 1, in_child.stderr
        doc = json.loads(in_child.stdout)
        assert (doc["sweep"], doc["leak_count"]) == ("child", target.int("leak_count"))
        assert cg.oom_kills() == 0
    assert target.alive() and target.tracer() == 0 and target.state() != "t"


def test_a_scanner_under_a_limit_copies_no_more_than_its_room_without_the_shim(targets):
    """The same 200 MiB heap in a process without the shim, the scanner in a
    cgroup of 160 MiB: the copy it takes while the target is stopped is
    bounded by the room its own cgroup leaves, as a shim target's is. The
    copy that does not fit is refused (exit 2, one line) rather than the
    scanner being OOM-killed mid-copy (--snapshot stopped); the
    copy-on-write snapshot of the injected fork holds no copy and scans it."""
    target = targets.start(PROGRAMS / "big_heap.c", "200", str(64 * 1024), preload=False)
    with memory_cgroup("ur-scanner-noshim") as cg:
        if cg is None:
            pytest.skip("no cgroup v1 memory hierarchy to make a cgroup in here")
        cg.limit(160 * MIB)
        cli = _scanner_in(cg, target.pid)

        copied = cli("--snapshot", "stopped")
        assert copied.returncode == 2, (copied.returncode, copied.stderr)
        assert copied.stderr.count("\n") == 1, copied.stderr
        assert "memory cgroup" in copied.stderr, copied.stderr
        assert target.alive() and target.tracer() == 0 and target.state() != "t"
        forked = cli("--json")
        assert forked.returncode == 1, forked.stderr
        doc = json.loads(forked.stdout)
        # glibc's usable sizes: a chunk's size less its header, 8 more than asked.
        count = target.int("leak_count")
        assert (doc["leak_count"], doc["leak_bytes"]) == (
            count,
            target.int("leak_bytes") + 8 * count,
        )
        assert cg.oom_kills() == 0
    assert target.alive() and target.tracer() == 0 and target.state() != "t"


def test_a_scanner_without_room_for_the_sweep_refuses_it_without_the_shim(targets):
    """The same 400k allocations in a process without the shim: their count
    is known once glibc's heap is walked, and the sweep's room is checked
    then, before the mark allocates. In a cgroup of 64 MiB the scan of the
    injected fork's child was OOM-killed; now it refuses (exit 2, one line),
    the target as it was. With room, the same scanner scans it."""
    target = targets.start(PROGRAMS / "many.c", str(LIVE), str(LEAKED), preload=False)
    with memory_cgroup("ur-scanner-sweep-noshim") as cg:
        if cg is None:
            pytest.skip("no cgroup v1 memory hierarchy to make a cgroup in here")
        cli = _scanner_in(cg, target.pid)

        cg.limit(64 * MIB)
        res = cli()
        assert res.returncode == 2, (res.returncode, res.stderr)
        assert res.stderr.count("\n") == 1 and "memory cgroup" in res.stderr, res.stderr
        counted = re.search(r"sweeping (\d+) allocations", res.stderr)
        assert counted and int(counted.group(1)) >= LIVE + LEAKED, res.stderr
        assert cg.oom_kills() == 0
        wait_until(lambda: children(target.pid) == [], what="snapshot child gone")
        assert target.alive() and target.tracer() == 0 and target.state() != "t"
        cg.limit(512 * MIB)
        done = cli("--json")
        assert done.returncode == 1, done.stderr
        assert json.loads(done.stdout)["leak_count"] == target.int("leak_count")
    assert target.alive() and target.tracer() == 0 and target.state() != "t"
