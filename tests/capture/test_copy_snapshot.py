"""The copy snapshot (capture/copy_snapshot.py, capture/write_tracking.py,
native/shim/write_tracking.c, native/scanner/page_sync.c) on real targets:
exact verdicts while threads write during the copy, and the target left
exactly as it was (no mapping still write-protected, the tracker idle),
whatever happens to the scan."""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.cbuild import build
from tests.support.plans import first_capture
from tests.support.targets import Target, wait_state
from tests.support.tracking import (
    copy_unsupported,
    kill_scanner_while_tracking,
    tracker_cmd,
    wait_untracked,
    write_protected,
)
from unreachable import _native
from unreachable.capture import copy_snapshot, write_tracking
from unreachable.capture.copy_snapshot import (
    COPY_FROM_BYTES,
    COPY_MAX_ALLOCATIONS,
    _cow_ranges,
    _helper_stack,
    copy_while_running,
    read_shared,
    refresh,
)
from unreachable.capture.target import open_target
from unreachable.capture.write_tracking import (
    IDLE,
    MODE_COW,
    TrackingUnavailable,
    _disarmed,
    helper_uffd,
    tracked_writes,
)
from unreachable.process.maps import read_maps
from unreachable.scan import ScanOptions, scan
from unreachable.scan.facts import expected_allocations, gather_facts

HERE = Path(__file__).parent
PROGRAMS = HERE.parent / "scan" / "programs"
CLI = [sys.executable, "-m", "unreachable.cli.main"]


pytestmark = pytest.mark.skipif(bool(copy_unsupported()), reason=copy_unsupported())


def exact(target, report) -> None:
    assert (report.leak_count, report.leak_bytes) == (
        target.int("leak_count"),
        target.int("leak_bytes"),
    ), [(hex(e.address), e.size) for e in report.leaks]


def test_threads_writing_during_the_copy_invent_no_leak(targets):
    """churn.c's four threads allocate, free and relink all through the copy:
    every page they wrote must be read again while the target is stopped."""
    target = targets.start(PROGRAMS / "churn.c")
    for _ in range(6):
        report = scan(target.pid, ScanOptions(snapshot="copy"))
        exact(target, report)
        assert report.snapshot == "copy" and report.snapshot_note == ""
    wait_untracked(target.pid)
    assert target.alive() and target.tracer() == 0


def test_the_stop_reads_again_only_what_was_written(targets):
    # The classic copy, as taken where no copy-on-write snapshot can be had.
    target = targets.start(PROGRAMS / "churn.c")
    # The churning threads write some pages during a copy (their arenas,
    # their stacks), unless the machine gave them no CPU while it was
    # taken: copies are taken until one saw writes.
    for _ in range(20):
        copy_snapshot._classic_next.add(target.pid)
        with first_capture(target.pid, "copy") as (capture, _):
            assert capture.snapshot == "copy" and capture.copy is not None
            stats = capture.copy.stats
            mappings = capture.mappings
        assert mappings and target.tracer() == 0
        wait_untracked(target.pid)
        if stats["pages_read"] + stats["pages_untracked"] > 0:
            break
    # What was written was read again; the rest of what was copied was
    # kept, or is absent and known to be zero without a read.
    held_pages = stats["bytes_held"] // 4096
    assert stats["pages_read"] + stats["pages_untracked"] > 0, stats
    assert stats["pages_kept"] > 0 and stats["pages_read"] * 4 < held_pages, stats


def test_the_classic_copys_stop_leaves_shared_memory_to_after_it(targets):
    """Shared memory carries no write tracking of this process, so the
    classic copy's stop read all of it again (PostgreSQL's postmaster,
    which may not use a synchronous userfaultfd: 26-43 ms against a fork's
    2-10). It is read after the release, as a fork or a copy-on-write
    snapshot reads it; its words still keep what they point to."""
    target = targets.start(HERE / "programs" / "shared_memory.c")
    shared_pages = target.int("shared_bytes") // 4096
    copy_snapshot._classic_next.add(target.pid)
    with first_capture(target.pid, "copy") as (capture, _):
        assert capture.snapshot == "copy" and capture.copy is not None
        stats = capture.copy.stats
    assert target.tracer() == 0
    wait_untracked(target.pid)
    assert stats["pages_untracked"] < shared_pages // 4, stats
    _classic_scans_are_exact(target, 1)


def _classic_scans_are_exact(target: Target, scans: int) -> None:
    for _ in range(scans):
        copy_snapshot._classic_next.add(target.pid)
        report = scan(target.pid, ScanOptions(snapshot="copy"))
        assert report.snapshot == "copy" and report.snapshot_note == ""
        exact(target, report)
        wait_untracked(target.pid)
    assert target.alive() and target.tracer() == 0


def _anonymous_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("RssAnon:"))


def test_a_copy_on_write_snapshot_holds_only_the_pages_written(targets):
    # 64 MB of blocks nobody writes, and threads churning beside them: the
    # snapshot holds what they wrote after the stop (and the shim's own
    # memory and the helper's stack, saved whole), not the heap.
    target = targets.start(HERE / "programs" / "cow_writer.c", "64000")
    with first_capture(target.pid, "copy") as (capture, _):
        assert capture.snapshot == "copy" and capture.copy is not None
        assert target.tracer() == 0
        stats = capture.copy.stats
    assert stats["pages_saved"] > 0 and stats["bytes_lost"] == 0, stats
    assert stats["bytes_held"] * 4 < _anonymous_kib(target.pid) * 1024, stats
    wait_untracked(target.pid)


def test_pages_written_during_the_protection_are_saved_by_the_stop(targets):
    """writer.c's thread counts in a heap block and an mmap'ed page all the
    time. Once both were written after the protection, the stop saves them
    as they are and leaves them unprotected: the counting goes on after the
    release without waiting for the scanner (no fault on them), while the
    snapshot keeps the stop's values. The scanner's thread serving the
    faults runs at real-time priority where the scanner may."""
    target = targets.start(HERE / "programs" / "writer.c")
    pid = target.pid
    addrs = [int(target.info[k], 16) for k in ("heap", "mmap")]
    opened = open_target(pid)
    with tracked_writes(opened, mode=MODE_COW):
        copy = _native.MemoryCopy(pid, cache_bytes=64 << 20)
        try:
            copy.cow_start(helper_uffd(pid, asynchronous=False))
            deadline = time.monotonic() + 20
            while os.geteuid() == 0 and _fifo_threads() != 1:
                assert time.monotonic() < deadline, "the server is not real-time"
                time.sleep(0.001)
            mappings = read_maps(pid)
            protected, saved = _cow_ranges(opened, mappings, _helper_stack(opened))
            copy.cow_register(protected)
            copy.cow_protect()
            protected_at = [_live_u64(pid, a) for a in addrs]
            while not all(_live_u64(pid, a) > v for a, v in zip(addrs, protected_at, strict=True)):
                assert time.monotonic() < deadline, "the writer wrote nothing"
            session = _native.Session(pid)
            try:
                session.stop()
                copy.cow_save(saved)
                copy.cow_seal()
                at_stop = [_live_u64(pid, a) for a in addrs]
                session.release()
            finally:
                session.close()
            while not all(_live_u64(pid, a) > v for a, v in zip(addrs, at_stop, strict=True)):
                assert time.monotonic() < deadline, "the writer made no progress"
            held = [int.from_bytes(copy.read(a, 8), "little") for a in addrs]
            stats = copy.stats
        finally:
            copy.close()
    assert held == at_stop
    assert stats["seal_saved"] >= len({a >> 12 for a in addrs}), stats
    assert stats["dirty_faults"] == 0, stats
    wait_untracked(pid)


def test_the_stop_saves_what_it_leaves_unprotected_a_run_of_pages_at_a_time(targets):
    """The shim's own memory and the helper's stack (some 150 pages, the
    target stopped) and the file-private pages the kernel would not
    register are read a run of pages at a time, not a page at a time."""
    target = targets.start(HERE / "programs" / "writer.c")
    with first_capture(target.pid, "copy") as (capture, _):
        assert capture.snapshot == "copy" and capture.copy is not None
        opened = open_target(target.pid)
        _, saved = _cow_ranges(opened, capture.mappings, _helper_stack(opened))
        stats = capture.copy.stats
    pairs = list(struct.iter_unpack("<QQ", saved))
    pages = sum((e - b) >> 12 for b, e in pairs)
    assert pages >= 32, pairs
    assert 0 < stats["save_reads"] * 4 < pages, (stats, pages)
    wait_untracked(target.pid)


@pytest.mark.parametrize("spare", [1, 2])
def test_the_copy_ends_beside_the_scan_only_with_a_core_to_spare(targets, spare):
    """The copy's end (unregistering, a walk of the target's page tables,
    or the classic copy's free) runs beside the rest of the scan only where
    the target's busy threads leave the scan a second core: with one, the
    scan's own thread ends it as the capture's block ends, and a second
    thread of the scan never shares a core with one of the target's
    (docs/pause.md "What the target feels")."""
    cpus = len(os.sched_getaffinity(0))
    if cpus < spare:
        pytest.skip(f"{cpus} CPU")
    target = targets.start(HERE / "programs" / "writer.c")
    with first_capture(target.pid, "copy", busy_threads=cpus - spare) as (capture, _):
        assert capture.snapshot == "copy"
    ending = write_tracking._ending.get(target.pid, [])
    if spare == 1:
        assert not ending and not write_protected(target.pid)
    else:
        assert len(ending) == 1
    wait_untracked(target.pid)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to start a target that drops it")
def test_auto_knows_which_copy_it_will_get(targets):
    """A target holding CAP_SYS_PTRACE opens a synchronous userfaultfd: its
    copy is copy-on-write. One that dropped root cannot unless
    vm.unprivileged_userfaultfd is set: its copy is the classic one, which
    holds the heap, and the facts auto plans from say so beforehand."""
    with open("/proc/sys/vm/unprivileged_userfaultfd") as f:
        anyone = f.read().strip() == "1"
    for args, expected in (((), True), (("unprivileged",), anyone)):
        target = targets.start(HERE / "programs" / "writer.c", *args)
        assert copy_snapshot.cow_possible(target.pid) == expected
        assert gather_facts(target.pid, ScanOptions()).cow == expected
        with first_capture(target.pid, "copy") as (capture, _):
            assert capture.snapshot == "copy" and capture.copy is not None
            assert ("faults" in capture.copy.stats) == expected, capture.copy.stats
        wait_untracked(target.pid)


def _fifo_threads() -> int:
    """This process's threads running SCHED_FIFO (stat's policy field)."""
    n = 0
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/stat") as f:
            n += f.read().rsplit(")", 1)[1].split()[38] == "1"
    return n


def _uid(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("Uid:"))


def _live_u64(pid: int, addr: int) -> int:
    with open(f"/proc/{pid}/mem", "rb") as f:
        f.seek(addr)
        return int.from_bytes(f.read(8), "little")


@pytest.mark.parametrize("privileges", [(), ("unprivileged",)], ids=["root", "dropped"])
def test_the_copy_holds_memory_as_it_was_at_the_stop(targets, privileges):
    """writer.c counts in .data, a heap block and an mmap'ed page without
    pause: the copy must hold the stop's values, not the first copy's.
    "unprivileged": a target that dropped root cannot open its own pagemap,
    so its anonymous memory is write-protected whole (MariaDB's copy
    snapshot failed with "Permission denied")."""
    target = targets.start(HERE / "programs" / "writer.c", *privileges)
    pid = target.pid
    addrs = [int(target.info[k], 16) for k in ("data", "heap", "mmap")]
    session = _native.Session(pid)
    try:
        with copy_while_running(open_target(pid)) as copy:
            copied_by_now = [_live_u64(pid, a) for a in addrs]
            # Written since the copy: only the stop's read again holds it.
            deadline = time.monotonic() + 20
            while not all(_live_u64(pid, a) > c for a, c in zip(addrs, copied_by_now, strict=True)):
                assert time.monotonic() < deadline, "the writer made no progress"
            session.stop()
            try:
                maps = refresh(copy, pid)
                at_stop = [_live_u64(pid, a) for a in addrs]
            finally:
                session.release()
        read_shared(copy, maps)
        held = [int.from_bytes(copy.read(a, 8), "little") for a in addrs]
        copy.close()
    finally:
        session.close()
    assert held == at_stop
    assert all(h > c for h, c in zip(held, copied_by_now, strict=True)), (held, copied_by_now)
    wait_untracked(pid)
    if privileges:
        assert os.stat(f"/proc/{pid}/pagemap").st_uid == 0 != _uid(pid)
        report = scan(pid, ScanOptions(snapshot="copy"))
        assert report.snapshot == "copy" and report.snapshot_note == ""
        wait_untracked(pid)


def test_the_target_is_left_as_it_was(targets):
    target = targets.start(PROGRAMS / "many.c", "20000", "10000")
    with open(f"/proc/{target.pid}/maps") as f:
        maps_before = f.read()
    report = scan(target.pid, ScanOptions(snapshot="copy"))
    exact(target, report)
    wait_untracked(target.pid)
    with open(f"/proc/{target.pid}/maps") as f:
        assert f.read() == maps_before
    assert _write_protected_pages(target.pid) == 0
    assert target.tracer() == 0 and target.state() in ("S", "R")
    target.proc.stdin.close()
    assert target.proc.wait(timeout=10) == 0


def _write_protected_pages(pid: int) -> int:
    """Pages of the private writable mappings whose page-table entries still
    carry userfaultfd write protection (/proc/PID/pagemap bit 57)."""
    n = 0
    with open(f"/proc/{pid}/pagemap", "rb") as pagemap:
        for m in read_maps(pid):
            if not (m.readable and m.writable and m.private) or m.end - m.start > 1 << 30:
                continue
            pagemap.seek(m.start // 4096 * 8)
            raw = pagemap.read((m.end - m.start) // 4096 * 8)
            n += sum(e >> 57 & 1 for (e,) in struct.iter_unpack("<Q", raw))
    return n


def _page_tables_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmPTE:"):
                return int(line.split()[1])
    raise AssertionError("no VmPTE")


def test_a_sparse_reservation_costs_no_page_tables(targets):
    # Write-protecting whole ranges would mark every absent page: 128 MiB of
    # page tables for this 64 GiB reservation, left in the target.
    target = targets.start(PROGRAMS / "sparse.c")
    before = _page_tables_kib(target.pid)
    report = scan(target.pid, ScanOptions(snapshot="copy"))
    exact(target, report)
    wait_untracked(target.pid)
    assert _page_tables_kib(target.pid) - before < 1024


def _past_the_threshold(pid: int) -> dict[str, int | None]:
    """Facts that put the target's heap past the size a copy pays off at."""
    return {
        "anonymous_bytes": COPY_FROM_BYTES,
        "allocations": expected_allocations(pid, open_target(pid).shim.descriptor_addr),
    }


def test_auto_copies_a_heap_above_the_threshold(targets):
    target = targets.start(PROGRAMS / "many.c", "20000", "10000")
    with first_capture(target.pid) as (capture, _):
        assert capture.snapshot == "fork"  # a small heap: the page-table copy is cheap
    with first_capture(target.pid, **_past_the_threshold(target.pid)) as (capture, why):
        assert capture.snapshot == "copy", why
    wait_untracked(target.pid)


def test_auto_forks_for_millions_of_allocations(targets):
    # The scanner's own registry and index work on a classic copy would make
    # the whole scan much longer than the in-child sweep of a fork. A
    # copy-on-write copy takes a fork's time: auto copies whatever the
    # allocations where the copy will be copy-on-write.
    target = targets.start(PROGRAMS / "many.c", str(COPY_MAX_ALLOCATIONS), "100000")
    classic = {**_past_the_threshold(target.pid), "cow": False}
    with first_capture(target.pid, **classic) as (capture, why):
        assert capture.snapshot == "fork" and why == ""
    cow = {**_past_the_threshold(target.pid), "cow": True}
    with first_capture(target.pid, **cow) as (capture, why):
        assert capture.snapshot == "copy" and why == ""
        assert "faults" in capture.copy.stats  # copy-on-write
    wait_untracked(target.pid)


def test_auto_falls_back_to_fork_and_says_why(targets):
    # Nothing to track with: a tracker another scan holds. The second
    # tracked_writes is refused; auto then forks, and the note says why.
    target = targets.start(PROGRAMS / "globals.c")
    with tracked_writes(open_target(target.pid)):
        with pytest.raises(TrackingUnavailable, match="another scan"):
            with tracked_writes(open_target(target.pid)):
                pass
        with first_capture(target.pid, **_past_the_threshold(target.pid)) as (capture, why):
            assert capture.snapshot == "fork"
            assert "another scan is copying" in why
    wait_untracked(target.pid)


def _on_cpu_ns(pid: int, tid: int) -> int:
    """The thread's time on a CPU so far (schedstat: ns, not clock ticks)."""
    with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
        return int(f.read().split()[0])


def test_the_scanner_arms_the_write_tracking_not_the_helper(targets):
    """Protecting a heap's pages and taking that down walk its page tables
    (tens of ms per GiB). The helper doing it is one of the target's
    threads, in its scheduling group, and takes the core of a busy one: the
    scanner does it through the helper's userfaultfd, and the helper's CPU
    time over a whole tracking of 256 MiB is a small part of what the same
    tracking costs it when it arms by itself (arm_here=False, the way of a
    scanner that cannot take the descriptor): both include the helper's
    teardown, whose pagemap walk and unregisters of the whole heap are
    about a sixth of the arming. Both leave nothing behind."""
    target = targets.start(PROGRAMS / "big_heap.c", "256")
    opened = open_target(target.pid)
    helper = opened.header.helper_tid

    def helper_ns(arm_here: bool) -> int:
        before = _on_cpu_ns(target.pid, helper)
        with tracked_writes(opened, arm_here=arm_here) as ranges:
            assert ranges > 0 and write_protected(target.pid)
            armed_by_helper = _tracker_ranges(target.pid) > 0
        wait_untracked(target.pid)
        assert armed_by_helper != arm_here
        return _on_cpu_ns(target.pid, helper) - before

    itself = helper_ns(arm_here=False)
    scanner_armed = helper_ns(arm_here=True)
    assert scanner_armed * 4 < itself, (scanner_armed, itself)
    exact(target, scan(target.pid, ScanOptions(snapshot="concurrent")))
    wait_untracked(target.pid)


# write_protect.h UR_WALK_CHUNK: the most one walk of the target's page
# tables covers.
WALK_PIECE = 8 << 20


@pytest.mark.parametrize("mode", ["copy", "concurrent"])
def test_no_write_protection_call_walks_more_than_a_piece_of_the_heap(targets, tmp_path, mode):
    """Protecting pages and unregistering them walk the target's page
    tables holding its mmap lock (for reading, and for writing), and a
    thread of it that maps, unmaps or grows its heap waits for the whole
    walk: one call over a 2.1 GB heap held it 55-60 ms. Every such call a
    scan makes covers at most one piece, whatever the heap's size: here a
    64 MiB heap, one mapping (each call noted by walk_log.c on its way to
    the kernel). An unregistering walks the pages its range holds (a
    stretch without pages goes in one call, write_protect.h); a protection
    through UFFDIO_WRITEPROTECT walks its whole range."""
    target = targets.start(PROGRAMS / "big_heap.c", "64")
    log = tmp_path / "walks"
    env = {**os.environ, "LD_PRELOAD": str(build(HERE / "programs" / "walk_log.c", shared=True))}
    res = subprocess.run(
        [*CLI, "scan", str(target.pid), "--snapshot", mode, "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**env, "WALK_LOG": str(log), "WALK_PID": str(target.pid)},
    )
    assert res.returncode == 1, res.stderr
    assert json.loads(res.stdout)["snapshot"] == mode
    wait_untracked(target.pid)
    lines = log.read_text().splitlines()
    walks = [
        (name, int(pages) * 4096 if name == "UFFDIO_UNREGISTER" else int(length))
        for name, _, length, pages in map(str.split, lines)
    ]
    assert all(n >= 0 for _, n in walks), lines[:3]
    made = {"UFFDIO_UNREGISTER"} | ({"UFFDIO_WRITEPROTECT"} if mode == "copy" else set())
    assert {name for name, _ in walks} >= made
    assert max(n for _, n in walks) <= WALK_PIECE, sorted(walks, key=lambda w: -w[1])[:3]


def _switches(pid: int, tid: int) -> int:
    with open(f"/proc/{pid}/task/{tid}/status") as f:
        return next(int(ln.split()[1]) for ln in f if ln.startswith("voluntary_ctxt_switches"))


@pytest.mark.parametrize("mode", [0, MODE_COW])
def test_the_helper_sleeps_between_its_looks_at_a_long_tracking(targets, mode):
    """While writes are tracked the helper looks at the scanner every
    10 ms and sleeps between; the give-back it leaves for after the
    tracking (due every 2 s) must not end its sleeps once its time has
    passed, which made it spin on one of the target's cores for the rest of
    the scan. Held for 300 of its sleeps (3 s, past that time), it stays
    far below a busy thread's CPU."""
    target = targets.start(PROGRAMS / "globals.c")
    opened = open_target(target.pid)
    helper = opened.header.helper_tid
    with tracked_writes(opened, mode=mode):
        cpu, slept = _on_cpu_ns(target.pid, helper), _switches(target.pid, helper)
        while _switches(target.pid, helper) - slept < 300:
            if _on_cpu_ns(target.pid, helper) - cpu > 500_000_000:
                break  # spinning: it would never sleep 300 times
            time.sleep(0.05)
        used = _on_cpu_ns(target.pid, helper) - cpu
    wait_untracked(target.pid)
    assert used < 100_000_000, used


@pytest.mark.parametrize("mode", ["copy", "concurrent"])
def test_a_scanner_that_may_not_take_the_descriptor_leaves_the_arming_to_the_helper(targets, mode):
    """Under systemd's @system-service filter pidfd_getfd kills the caller:
    the scanner does not call it, and the helper arms and disarms the
    tracking itself (the copy is then the classic one)."""
    target = targets.start(PROGRAMS / "globals.c")
    launcher = build(HERE / "programs" / "no_getfd.c")
    res = subprocess.run(
        [str(launcher), *CLI, "scan", str(target.pid), "--snapshot", mode, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 1, (res.returncode, res.stderr)
    report = json.loads(res.stdout)
    assert report["snapshot"] == mode, report["snapshot_note"]
    assert report["leak_count"] == target.int("leak_count")
    assert _tracker_ranges(target.pid) > 0  # the helper armed
    wait_untracked(target.pid)


def _tracker_ranges(pid: int) -> int:
    """What the helper reported registering (0: the scanner arms)."""
    addr = open_target(pid).header.write_tracker
    with open(f"/proc/{pid}/mem", "rb") as f:
        f.seek(addr)
        raw = f.read(_native.abi_sizeof("ur_write_tracker"))
    return _native.abi_decode("ur_write_tracker", raw)["ranges"]


def test_scanner_killed_while_tracking_stops_the_tracking(targets):
    target = targets.start(PROGRAMS / "many.c", "600000", "300000")
    kill_scanner_while_tracking(target.pid)
    # The helper sees the scanner's pid gone within its 10 ms poll.
    wait_untracked(target.pid)
    assert target.tracer() == 0 and target.state() in ("S", "R")
    report = scan(target.pid, ScanOptions(snapshot="copy"))
    exact(target, report)
    target.proc.stdin.close()
    assert target.proc.wait(timeout=10) == 0


def test_cli_copy_snapshot(targets):
    import json

    target = targets.start(PROGRAMS / "globals.c")
    res = subprocess.run(
        [*CLI, "scan", str(target.pid), "--snapshot", "copy", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 1, res.stderr
    report = json.loads(res.stdout)
    assert report["snapshot"] == "copy" and report["leak_count"] == target.int("leak_count")
    wait_untracked(target.pid)


@pytest.mark.parametrize("ends", ["reported", "failed"])
def test_the_cli_lets_the_target_go_before_it_exits(targets, tmp_path, ends):
    """The copy-on-write snapshot's end (unregistering the heap, a walk of
    its page tables) runs beside the report, on a thread of its own: the
    CLI's exit waits for it, whether the scan reports or fails after its
    snapshot (here: an output file that cannot be written). Nothing of the
    protection is left the moment the process is gone (the helper, which
    ends a dead scanner's snapshot, would take up to its 10 ms poll)."""
    target = targets.start(PROGRAMS / "big_heap.c", "256")
    out = tmp_path / ("report.json" if ends == "reported" else "missing/report.json")
    res = subprocess.run(
        [*CLI, "scan", str(target.pid), "--snapshot", "copy", "--json", "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert write_protected(target.pid) == [] and _write_protected_pages(target.pid) == 0
    if ends == "reported":
        assert res.returncode in (0, 1), res.stderr
        report = json.loads(out.read_text())
        assert report["snapshot"] == "copy" and "faults" not in report["snapshot_note"]
    else:
        assert res.returncode == 2 and "cannot write" in res.stderr, res.stderr
    wait_untracked(target.pid)


def test_cli_copy_of_a_user_stopped_target_is_refused(targets):
    target = targets.start(PROGRAMS / "globals.c")  # its helper running
    os.kill(target.pid, signal.SIGSTOP)
    try:
        wait_state(target, "T")
        res = subprocess.run(
            [*CLI, "scan", str(target.pid), "--snapshot", "copy"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert res.returncode == 2 and res.stdout == ""
        assert res.stderr.strip().count("\n") == 0 and "Traceback" not in res.stderr
        assert "no copy snapshot" in res.stderr and "SIGSTOP" in res.stderr, res.stderr
        assert target.state() == "T" and target.tracer() == 0
        assert tracker_cmd(target.pid) == IDLE
    finally:
        os.kill(target.pid, signal.SIGCONT)


def test_copy_under_a_seccomp_filter_is_refused(targets):
    # A filter could kill the process on the helper's userfaultfd(); unlike
    # the fork snapshot's clone, nothing proves it will not: never asked.
    target = targets.start(PROGRAMS / "seccomp_filter.c", "errno-uname")
    res = subprocess.run(
        [*CLI, "scan", str(target.pid), "--snapshot", "copy"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 2, res
    assert "no copy snapshot: the target has a seccomp filter" in res.stderr, res.stderr
    assert target.alive() and target.tracer() == 0
    assert tracker_cmd(target.pid) == IDLE and not write_protected(target.pid)


def _uffds(pid: int) -> int:
    n = 0
    for name in os.listdir(f"/proc/{pid}/fd"):
        try:
            n += os.readlink(f"/proc/{pid}/fd/{name}") == "anon_inode:[userfaultfd]"
        except OSError:
            continue
    return n


# A scanner that takes a copy-on-write snapshot, says so, and holds it (its
# thread serving the target's faults) until its stdin closes; then it says
# why the snapshot could not be trusted ("" if it can).
HOLDER = """
import sys
from tests.support.plans import first_capture
from unreachable.capture.copy_snapshot import cow_broken
with first_capture(int(sys.argv[1]), "copy") as (capture, _):
    assert capture.snapshot == "copy", capture.snapshot_error
    print("sealed", flush=True)
    sys.stdin.read()
    print(repr(cow_broken(capture.copy, int(sys.argv[1]))), flush=True)
"""


def _holder(pid: int) -> subprocess.Popen[str]:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(pid)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=HERE.parent.parent,
    )
    assert holder.stdout is not None and holder.stdout.readline() == "sealed\n"
    return holder


def _goes_on(pid: int, rounds: int) -> None:
    after = _live_u64(pid, rounds)
    deadline = time.monotonic() + 20
    while _live_u64(pid, rounds) < after + 1000:
        assert time.monotonic() < deadline, "the target's threads made no progress"


def test_scanner_killed_while_it_holds_a_copy_on_write_snapshot(targets):
    """SIGKILL of the scanner while it holds the copy-on-write snapshot, the
    target's threads rewriting pages it has not saved: none of them may stay
    blocked on a write, the helper takes the protection down, and every
    block reads back as its thread wrote it."""
    target = targets.start(HERE / "programs" / "cow_writer.c", "200000")
    pid = target.pid
    holder = _holder(pid)
    _goes_on(pid, target.int("rounds"))  # served meanwhile
    holder.kill()
    holder.wait()
    wait_untracked(pid)
    assert _uffds(pid) == 0 and target.tracer() == 0 and target.state() in ("S", "R")
    _goes_on(pid, target.int("rounds"))
    assert _live_u64(pid, target.int("bad")) == 0
    report = scan(pid, ScanOptions(snapshot="copy"))
    exact(target, report)
    assert report.snapshot == "copy" and report.snapshot_note == ""
    assert _live_u64(pid, target.int("bad")) == 0


def test_memory_released_during_a_copy_on_write_scan_invents_no_leak(targets):
    """unmapper.c frees (unmaps) big blocks that hold the only pointer to a
    small one, all the time: the kernel reports an unmap only once it is
    done, so the bytes the snapshot had not saved are gone, and the scan is
    made again over a classic copy. Exactly the dropped blocks are reported
    every time, until a scan has met such an unmap (most do)."""
    _exact_until_made_again(targets.start(HERE / "programs" / "unmapper.c"), at_least=1)


def test_roots_released_during_a_copy_on_write_scan_invent_no_leak(targets):
    """root_unmapper.c moves the only pointer to each of 64 blocks from
    pages it maps (roots, not blocks) to new ones, and unmaps the old, all
    the time: a page that held memory at the stop, lost before it was
    saved, is a root the scan needed. It is made again over a classic copy,
    and exactly the dropped blocks are reported every time."""
    _exact_until_made_again(targets.start(HERE / "programs" / "root_unmapper.c"), at_least=4)


def _exact_until_made_again(target: Target, at_least: int) -> None:
    """Copy scans of target, each exact, until at least at_least were made
    and one of them was made again over a classic copy (30 at most)."""
    notes: list[str] = []
    while len(notes) < at_least or not any("had not saved; copied" in n for n in notes):
        assert len(notes) < 30, set(notes)
        report = scan(target.pid, ScanOptions(snapshot="copy"))
        exact(target, report)
        assert report.snapshot == "copy"
        notes.append(report.snapshot_note)
    wait_untracked(target.pid)


def test_a_stopped_scanner_does_not_hold_the_target(targets):
    """SIGSTOP of the scanner while it holds the copy-on-write snapshot: the
    target's writers would wait for it as long as it stays stopped. The
    helper ends the snapshot once the scanner's beats stop, and the threads
    go on; continued, the scanner finds the snapshot ended, which makes the
    scan start again over a classic copy."""
    target = targets.start(HERE / "programs" / "cow_writer.c", "200000")
    pid = target.pid
    holder = _holder(pid)
    os.kill(holder.pid, signal.SIGSTOP)
    try:
        wait_untracked(pid)
        _goes_on(pid, target.int("rounds"))
    finally:
        os.kill(holder.pid, signal.SIGCONT)
    out, _ = holder.communicate("", timeout=60)
    assert "helper ended the copy-on-write snapshot" in out, out
    assert _live_u64(pid, target.int("bad")) == 0
    wait_untracked(pid)


@pytest.mark.parametrize("snapshot", ["copy", "concurrent"])
def test_a_reservation_with_no_access_is_not_walked_at_the_end(targets, snapshot):
    """The tracking's teardown (the scanner's, then the helper's) walks the
    mappings in 8 MiB pieces. A reservation no thread can touch was never
    registered: walked, 120 TiB of it took each side seconds of CPU, the
    helper answering nothing meanwhile (a fork asked for then paused the
    target until it was done). Its teardown now ends as soon as it begins."""
    target = targets.start(HERE / "programs" / "reservation.c")
    reservation = target.int("reservation")
    assert reservation not in [m.start for m in _disarmed(read_maps(target.pid))]
    exact(target, scan(target.pid, ScanOptions(snapshot=snapshot)))
    # Milliseconds now; the walk took tens of seconds of CPU.
    wait_untracked(target.pid, timeout=5.0)


def test_thread_stacks_released_during_a_copy_on_write_scan_keep_the_snapshot(targets):
    """thread_churn.c starts and joins threads all the time, and glibc (its
    stack cache set to nothing) unmaps each stack as its thread is joined,
    during every scan. What those stacks held is no root of the snapshot,
    or was saved as the thread wrote it on its way out, or was never there:
    the scan keeps its copy-on-write snapshot, and its leaks are exact."""
    target = targets.start(
        HERE / "programs" / "thread_churn.c",
        env={"GLIBC_TUNABLES": "glibc.pthread.stack_cache_size=0"},
    )
    for _ in range(8):
        report = scan(target.pid, ScanOptions(snapshot="copy"))
        exact(target, report)
        assert (report.snapshot, report.snapshot_note) == ("copy", "")
    wait_untracked(target.pid)


def test_the_classic_copy_reads_untouched_private_memory_as_zero(targets):
    """A big block whose middle pages the program never wrote (R's vectors):
    absent when copied, so no chunk of the copy holds them; they read as
    zero because they lie in anonymous private memory. Reading the shared
    memory after the stop took that knowledge away (the sweep failed with
    EFAULT, `sweep failed`)."""
    target = targets.start(HERE / "programs" / "sparse_big_block.c")
    _classic_scans_are_exact(target, 2)
