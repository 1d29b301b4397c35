"""The concurrent snapshot (scan/concurrent.py): a mark over the running
target, two short stops, no copy of its heap. No leak may be invented while
threads move, free and allocate blocks all through the mark, and none lost."""

from __future__ import annotations

import bisect
import json
import os
import struct
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from tests.support.tracking import copy_unsupported, wait_untracked, write_protected
from unreachable import _native
from unreachable.allocations.registry import read_registry
from unreachable.capture import write_tracking
from unreachable.capture.copy_snapshot import COPY_FROM_BYTES
from unreachable.capture.target import open_target
from unreachable.capture.write_tracking import tracked_writes
from unreachable.errors import TargetUnscannable
from unreachable.model.report import ScanReport
from unreachable.process.maps import read_maps
from unreachable.process.status import thread_state
from unreachable.scan import ScanOptions, concurrent, scan
from unreachable.scan.concurrent import (
    _candidate_spans,
    _held_spans,
    _registry_copy,
    _registry_spans,
    _sync_ranges,
)
from unreachable.scan.facts import gather_facts
from unreachable.scan.plan import Plan, plan
from unreachable.scan.run import run_plans

HERE = Path(__file__).parent
SCAN_PROGRAMS = HERE.parent / "scan" / "programs"

needs_tracking = pytest.mark.skipif(bool(copy_unsupported()), reason=copy_unsupported())


def exact(target, report) -> None:
    assert (report.leak_count, report.leak_bytes) == (
        target.int("leak_count"),
        target.int("leak_bytes"),
    ), [(hex(e.address), e.size) for e in report.leaks]


@needs_tracking
@pytest.mark.parametrize("program", [HERE / "programs" / "mover.c", SCAN_PROGRAMS / "churn.c"])
def test_threads_moving_and_freeing_pointers_during_the_mark(targets, program):
    """mover.c moves the only pointer to each block between places read at
    different times, frees and reallocates; churn.c allocates, frees and
    reallocs: exactly the dropped blocks, every scan."""
    target = targets.start(program)
    for _ in range(5):
        report = scan(target.pid, ScanOptions(snapshot="concurrent"))
        exact(target, report)
        assert report.snapshot == "concurrent"
    # As auto takes it, with a bound it never passes: the probe before the
    # first mark lists the pages written so far for the first round.
    for _ in range(3):
        report = _probed_scan(target.pid)
        exact(target, report)
        assert report.snapshot == "concurrent"
    wait_untracked(target.pid)
    assert target.alive() and target.tracer() == 0


def _probed_scan(pid: int) -> ScanReport:
    """A concurrent scan as auto takes it, with a stop bound it never
    passes: the probe before the first mark runs."""
    options = ScanOptions()
    bounded = Plan("concurrent", give_way_ms=1e9, give_way_to="fork")
    return run_plans(gather_facts(pid, options), [bounded], options)


def _spy_decodes(monkeypatch, pid: int) -> list[tuple[int, int]]:
    """At each registry decode of a concurrent mark: the teardown threads
    running and the mappings still write-protected."""
    seen: list[tuple[int, int]] = []
    decode = concurrent._read_registry

    def spied(copy, addr, threads):
        ending = len(write_tracking._ending.get(pid, []))
        seen.append((ending, len(write_protected(pid))))
        return decode(copy, addr, threads)

    monkeypatch.setattr(concurrent, "_read_registry", spied)
    return seen


@needs_tracking
def test_the_tracking_ends_once_the_last_stop_is_released(targets, monkeypatch):
    """Nothing after the second stop reads a written page: the tracking's
    teardown (a walk of the target's page tables) has begun by the time the
    registry of that stop is decoded, beside it where the scan has a core
    to spare (else before it: the next test), and the verdicts stay exact."""
    target = targets.start(HERE / "programs" / "mover.c")
    seen = _spy_decodes(monkeypatch, target.pid)
    for _ in range(3):
        seen.clear()
        report = scan(target.pid, ScanOptions(snapshot="concurrent"))
        exact(target, report)
        assert report.snapshot == "concurrent"
        # The first stop's registry (tracked), then the second's: the
        # teardown running beside it, or over.
        assert len(seen) == 2 and seen[0][0] == 0 and seen[0][1] > 0, seen
        assert seen[1][0] >= 1 or seen[1][1] == 0, seen
        wait_untracked(target.pid)
    assert target.alive() and target.tracer() == 0


@needs_tracking
@pytest.mark.parametrize("spare", [1, 2])
def test_the_tracking_ends_beside_the_scan_only_with_a_core_to_spare(targets, monkeypatch, spare):
    """mover.c's four threads keep busy. With one core to spare beside
    them, the scan's own thread takes the tracking down before it decodes
    the last registry: a second thread of the scan would share a core with
    one of the target's, which then waits a scheduler slice at a time
    (docs/pause.md "What the target feels"). With two, the teardown runs
    on a thread of its own, beside the decode."""
    target = targets.start(HERE / "programs" / "mover.c")
    seen = _spy_decodes(monkeypatch, target.pid)
    concurrent.concurrent_sweep(open_target(target.pid), mark_threads=1, spare=spare)
    assert len(seen) == 2 and seen[0] == (0, seen[0][1]) and seen[0][1] > 0, seen
    if spare == 1:
        assert seen[1] == (0, 0), seen
    else:
        assert seen[1][0] == 1, seen
    wait_untracked(target.pid)
    assert target.alive() and target.tracer() == 0


@needs_tracking
def test_the_reads_while_the_target_runs_take_the_team(targets, monkeypatch):
    """With one core to spare (mover.c's four threads keep busy), every read
    of the target's pages made while it runs (the candidates' bytes, the
    rounds) takes one thread; only the stops read with more."""
    target = targets.start(HERE / "programs" / "mover.c")
    calls: list[tuple[int, bool]] = []
    read = concurrent._read_runs

    def spied(pid, runs, threads=concurrent.READ_THREADS):
        stopped = all(thread_state(pid, t) == "t" for t in os.listdir(f"/proc/{pid}/task"))
        calls.append((threads, stopped))
        return read(pid, runs, threads)

    monkeypatch.setattr(concurrent, "_read_runs", spied)
    concurrent.concurrent_sweep(open_target(target.pid), mark_threads=1, spare=1)
    running = [threads for threads, stopped in calls if not stopped]
    assert running and set(running) == {1}, calls
    wait_untracked(target.pid)


@needs_tracking
def test_pipe_words_are_the_roots_of_every_mode(targets):
    """The concurrent mark reads the kernel-held values with roots/sources.py,
    as every mode does: a pipe's word pointing into an anonymous page
    without blocks counts as pipe data here too (filtered by the heap's
    spans it was left out, and the modes disagreed on the same pipe)."""
    target = targets.start(HERE / "programs" / "pipe_words.c")
    stopped = scan(target.pid, ScanOptions(snapshot="stopped"))
    concurrent = scan(target.pid, ScanOptions(snapshot="concurrent"))
    for report in (stopped, concurrent):
        exact(target, report)
    assert stopped.roots["pipe data"] == 16
    assert concurrent.roots["pipe data"] == stopped.roots["pipe data"]


def _auto_as_if_big(pid: int, options: ScanOptions):
    """A scan by auto of a heap past the size from which a fork pauses
    longer than a copy (the facts moved, the target small)."""
    facts = replace(gather_facts(pid, options), anonymous_bytes=COPY_FROM_BYTES)
    return run_plans(facts, plan(facts, options), options)


@needs_tracking
def test_auto_forks_when_writes_cannot_be_tracked(targets):
    """On a big heap auto plans a concurrent mark and a copy first (and
    under a budget only they might meet, on any heap). Another scan holds
    the target's write tracking, which both need: auto forks, and says
    why."""
    target = targets.start(HERE / "programs" / "mover.c")
    for options in (ScanOptions(), ScanOptions(max_pause_ms=0.01)):
        with tracked_writes(open_target(target.pid)):
            report = _auto_as_if_big(target.pid, options)
        exact(target, report)
        assert report.snapshot == "fork"
        assert "snapshot: another scan is copying" in report.snapshot_note
        wait_untracked(target.pid)
    # Asked for, it is refused instead.
    with tracked_writes(open_target(target.pid)):
        with pytest.raises(TargetUnscannable, match="no concurrent snapshot: another scan"):
            scan(target.pid, ScanOptions(snapshot="concurrent"))
    wait_untracked(target.pid)


@needs_tracking
def test_a_pause_past_the_budget_is_said(targets):
    target = targets.start(SCAN_PROGRAMS / "globals.c")
    for snapshot in ("concurrent", "fork"):
        report = scan(target.pid, ScanOptions(snapshot=snapshot, max_pause_ms=0.0001))
        exact(target, report)
        assert f"was paused {report.pause_ms:.1f} ms, more than --max-pause 0.0001 ms" in (
            report.snapshot_note
        ), report.snapshot_note
    report = scan(target.pid, ScanOptions(snapshot="fork", max_pause_ms=60_000))
    assert "more than --max-pause" not in report.snapshot_note
    wait_untracked(target.pid)


@needs_tracking
def test_the_hold_is_the_pause_from_its_last_thread_stopped(targets):
    """hold_ms: the part of pause_ms after the last thread stopped, in every
    mode (the concurrent mark's: the longer of its two stops' holds)."""
    target = targets.start(SCAN_PROGRAMS / "globals.c")
    for snapshot in ("concurrent", "copy", "fork", "stopped"):
        report = scan(target.pid, ScanOptions(snapshot=snapshot))
        exact(target, report)
        assert 0 < report.hold_ms <= report.pause_ms, (snapshot, report.hold_ms, report.pause_ms)
        wait_untracked(target.pid)


@needs_tracking
def test_cli_concurrent_snapshot(targets):
    target = targets.start(SCAN_PROGRAMS / "globals.c")
    out = subprocess.run(
        [sys.executable, "-m", "unreachable.cli.main", "scan", str(target.pid)]
        + ["--snapshot", "concurrent", "--json"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 1, out.stderr
    assert '"snapshot": "concurrent"' in out.stdout


def _pairs(*pairs: tuple[int, int]) -> bytes:
    return b"".join(struct.pack("<QQ", b, s) for b, s in pairs)


def _words(*values: int) -> bytes:
    return struct.pack(f"<{len(values)}Q", *values)


def test_remark_rescues_through_pages_values_and_rescued_blocks():
    """The re-mark's rules, on memory laid out by hand: a word of a written
    page inside a candidate is only stored; a value rescues at once, and a
    rescued candidate's stored words are followed; a gone one's stored words
    are roots."""
    a, b, c, d = 0x10000, 0x10100, 0x20000, 0x30000
    cands = _pairs((a, 32), (b, 32), (c, 32), (d, 32))
    state = bytearray(4)
    store = bytearray(4 * 32)
    # A written page at 0x10000 holds a's and b's bytes: a points to c, b is empty.
    page = bytearray(4096)
    page[0:8] = struct.pack("<Q", c)
    runs = _pairs((0x10000, 0x11000))
    # Inside a candidate: stored, not a root.
    assert _native.remark(cands, state, store, runs, page, b"", True, b"") == (0, b"")
    assert bytes(store[0:8]) == struct.pack("<Q", c) and state == bytearray(4)
    # A register pointing into a's middle rescues a, and through its stored
    # bytes c.
    assert _native.remark(cands, state, store, b"", b"", _words(a + 8), True, b"") == (2, b"")
    assert list(state) == [1, 0, 1, 0]
    # b freed and its memory reused: gone, its stored words become roots.
    store[32:40] = struct.pack("<Q", d + 31)
    state[1] = 3
    assert _native.remark(cands, state, store, b"", b"", b"", True, b"") == (1, b"")
    assert list(state) == [1, 2, 1, 1]


def test_remark_counts_a_value_one_past_a_candidates_end():
    """The re-mark's lookup is the mark's (docs/design.md "What refers to a
    block"): a value one past a candidate's end rescues it, also where that
    end is the next 4 KiB page's first byte; one further rescues nothing; an
    end that is the next candidate's begin is that candidate's."""
    a, b, c = 0x10000, 0x11000 - 32, 0x20000
    cands = _pairs((a, 32), (b, 32), (c, 16), (c + 16, 16))
    store = bytearray(96)

    def rescued(*values: int) -> list[int]:
        state = bytearray(4)
        _native.remark(cands, state, store, b"", b"", _words(*values), True, b"")
        return [i for i in range(4) if state[i]]

    assert rescued(a + 32) == [0]
    assert rescued(b + 32) == [1]
    assert rescued(a + 33, b + 33, c + 33) == []
    assert rescued(c + 16) == [3]
    assert rescued(c + 32) == [3]


def test_remark_reads_words_by_address_after_a_candidate_of_odd_size():
    """A candidate of 501 bytes ends 5 bytes into a word. The words after it
    on a written page, up to the next candidate, are pending at their own
    8-aligned addresses: read on from the candidate's end they were all 5
    bytes off, and a block that only such a word points to (a chain node
    allocated during the mark, next to a freed odd-sized block) was
    reported as leaked."""
    a, c = 0x10000, 0x20000
    cands = _pairs((a, 501), (c, 32))
    state = bytearray(2)
    store = bytearray(501 + 32)
    page = bytearray(4096)
    # After a's end (0x101f5): a new block's word at 0x10200 points to c.
    page[0x200:0x208] = struct.pack("<Q", c + 8)
    runs = _pairs((0x10000, 0x11000))
    assert _native.remark(cands, state, store, runs, page, b"", True, b"") == (
        0,
        _pairs((0x10200, 1)),
    )
    # The word that straddles a's end is pending as well (conservative).
    page[0x200:0x208] = bytes(8)
    page[0x1F0:0x1F8] = struct.pack("<Q", c)
    assert _native.remark(cands, state, store, runs, page, b"", True, b"") == (
        0,
        _pairs((0x101F0, 1)),
    )


def test_pending_words_are_replaced_when_their_page_is_read_again():
    """A pending word stands for its page as last read: a later round that
    reads the page again drops it (the pointer moved on) and keeps those of
    other pages; the last stop then decides by where each one lies."""
    c = 0x20000
    cands = _pairs((c, 32))
    state, store = bytearray(1), bytearray(32)
    page = bytearray(4096)
    page[8:16] = struct.pack("<Q", c)
    first = _native.remark(cands, state, store, _pairs((0x10000, 0x11000)), page, b"", True, b"")
    assert first == (0, _pairs((0x10008, 0)))
    other = _native.remark(
        cands, state, store, _pairs((0x50000, 0x51000)), page, b"", True, first[1]
    )
    assert other == (0, _pairs((0x10008, 0), (0x50008, 0)))
    again = _native.remark(
        cands, state, store, _pairs((0x10000, 0x11000)), bytes(4096), b"", True, other[1]
    )
    assert again == (0, _pairs((0x50008, 0)))
    # A dead stack frame's word (outside the root ranges at the last stop)
    # keeps nothing; one above the thread's SP does.
    assert (
        _native.resolve(cands, bytearray(1), store, again[1], _pairs((0x10000, 0x50000)), b"") == 0
    )
    assert _native.resolve(cands, state, store, again[1], _pairs((0x50000, 0x51000)), b"") == 1


def test_pairs_in_matches_begin_and_size():
    cands = _pairs((0x1000, 16), (0x2000, 32), (0x3000, 48))
    allocs = _pairs((0x3000, 48), (0x2000, 33), (0x9000, 16))
    assert _native.pairs_in(cands, allocs) == bytes([0, 0, 1])


def _vm_pte_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmPTE:"):
                return int(line.split()[1])
    return 0


@needs_tracking
def test_a_round_protects_again_only_pages_that_hold_data(targets):
    """A round clears the write marks of the pages it lists; absent pages of
    a sparse reservation must neither be listed nor protected: protecting
    them leaves a marker in each, page tables for all of it, and the next
    round (or the stop) would list them all as written."""
    from unreachable.process.maps import read_maps
    from unreachable.scan.concurrent import _tracked

    target = targets.start(SCAN_PROGRAMS / "sparse.c")
    pid = target.pid
    before = _vm_pte_kib(pid)
    with tracked_writes(open_target(pid)):
        ranges = _tracked(read_maps(pid), [])
        _native.written_pages(pid, ranges, True)
        again = _native.written_pages(pid, ranges, False)
        listed = sum(e - b for b, e in struct.iter_unpack("<QQ", again))
        assert listed < 1 << 20, listed
        assert _vm_pte_kib(pid) - before < 1024
    wait_untracked(pid)


def test_the_stops_page_walk_shared_by_threads_lists_the_same_pages(targets):
    """The second stop walks the written pages with two threads, its ranges
    cut by bytes (inside a mapping where the halves meet there): the pages
    listed are those one walker lists."""
    from unreachable.process.maps import read_maps
    from unreachable.scan.concurrent import _tracked

    def pages(runs: bytes) -> set[int]:
        return {p for b, e in struct.iter_unpack("<QQ", runs) for p in range(b, e, 4096)}

    target = targets.start(SCAN_PROGRAMS / "sparse.c")
    with _native.Session(target.pid) as s:
        s.stop()
        ranges = _tracked(read_maps(target.pid), [])
        one = pages(_native.written_pages(target.pid, ranges, False))
        assert one
        for threads in (2, 3, 4, 9):
            assert pages(_native.written_pages(target.pid, ranges, False, threads)) == one
        assert _native.written_pages(target.pid, b"", False, 2) == b""


def test_a_region_merged_with_its_neighbour_leaves_the_neighbour_tracked():
    """/proc/PID/maps shows one anonymous mapping where a shim region and
    the heap next to it have the same flags. The rounds must skip exactly
    the region (its write marks are the registry copy's) and keep reading
    the heap's part: skipping the whole mapping would leave writes to it
    unread, and a block moved there would look leaked."""
    from unreachable.process.maps import Mapping
    from unreachable.scan.concurrent import _tracked

    merged = Mapping(0x10000, 0x30000, "rw-p", 0, 0, "")
    data = Mapping(0x40000, 0x41000, "rw-p", 0, 7, "/lib/shim.so")
    region = (0x10000, 0x20000, 1)
    tracked = list(struct.iter_unpack("<QQ", _tracked([merged, data], [region])))
    assert tracked == [(0x20000, 0x30000), (0x40000, 0x41000)]


def test_concurrent_under_a_seccomp_filter_is_refused(targets):
    """As for a copy snapshot: a filter could kill the process on the
    helper's userfaultfd(). Exit 2, one line, the target left as it was."""
    from tests.support.tracking import tracker_cmd, write_protected
    from unreachable.capture.write_tracking import IDLE

    target = targets.start(SCAN_PROGRAMS / "seccomp_filter.c", "errno-uname")
    res = subprocess.run(
        [sys.executable, "-m", "unreachable.cli.main", "scan", str(target.pid)]
        + ["--snapshot", "concurrent"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 2, res
    assert "no concurrent snapshot: the target has a seccomp filter" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr
    assert target.alive() and target.tracer() == 0
    assert tracker_cmd(target.pid) == IDLE and not write_protected(target.pid)


def test_concurrent_needs_the_shim(targets):
    """Without the shim there is no registry and no helper to track writes:
    refused, rather than a glibc heap walk under another name."""
    from unreachable.errors import TargetNotShimmed

    target = targets.start(SCAN_PROGRAMS / "globals.c", preload=False, wait_helper=False)
    with pytest.raises(TargetNotShimmed):
        scan(target.pid, ScanOptions(snapshot="concurrent"))


def _userfaultfds(pid: int) -> list[str]:
    out = []
    for name in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{name}") == "anon_inode:[userfaultfd]":
                out.append(name)
        except OSError:
            pass
    return out


def _left_as_found(target) -> None:
    """No write tracking left behind: no mapping registered with a
    userfaultfd, none open, the helper idle, no tracer."""
    from tests.support.tracking import write_protected

    wait_untracked(target.pid)
    assert not write_protected(target.pid)
    assert _userfaultfds(target.pid) == []
    assert target.alive() and target.tracer() == 0


@needs_tracking
def test_a_mark_whose_rounds_do_not_converge_gives_way_before_its_last_stop(targets):
    """refcounts.c's two threads write every block of its 77 MB heap all
    the time: every round reads about all of it again. Bound by a pause
    its last stop would break, the mark gives up before that stop (the
    target was stopped once), and leaves the target as it found it: no
    mapping registered, no userfaultfd, no tracer."""
    from unreachable.scan.concurrent import MAX_ROUNDS, SMALL_ROUND, GaveWay, concurrent_sweep

    target = targets.start(HERE / "programs" / "refcounts.c")
    with pytest.raises(GaveWay) as gave:
        concurrent_sweep(open_target(target.pid), give_way_ms=1.0)
    e = gave.value
    # Rounds that never got down to what converges: given up after the
    # second (it did not shrink) or the last, or before the first mark by
    # the probe (the heap written faster than it is read).
    assert all(n > SMALL_ROUND for n in e.rounds), e.rounds
    assert (1 if e.probe_ms else 2) <= len(e.rounds) <= MAX_ROUNDS, (e.rounds, e.probe_ms)
    assert e.predicted_ms > e.bound_ms == 1.0
    assert "concurrent mark did not converge:" in str(e)
    _left_as_found(target)


def _bytes(runs: bytes) -> int:
    return sum(e - b for b, e in struct.iter_unpack("<QQ", runs))


ATTEMPTS = 5


def _writers_ran(pid: int, tracked: bytes) -> None:
    """Until the writers have written 16 MiB since the pages were last
    listed (a busy machine may keep them off a core for a while)."""
    deadline = time.monotonic() + 60
    while _bytes(_native.written_pages(pid, tracked, False)) < 16 << 20:
        assert time.monotonic() < deadline, "the writers never ran"
        time.sleep(0.01)


@needs_tracking
def test_rounds_that_do_not_shrink_give_way(targets):
    """The rounds' own rule, without the probe before them: the first round
    reads what was written since tracking began, the second about as much
    again (not half of it), and the last stop predicted from it passes the
    bound. The rounds end without giving way only on a round under
    SMALL_ROUND: the writers then wrote under 1 MiB while a round read 16
    or more, kept off a core by a loaded machine. That is the rule too (a
    small round ends the rounds), so it is checked and the rounds are run
    again, up to ATTEMPTS times."""
    from unreachable.scan.concurrent import (
        MAX_ROUNDS,
        SHRINK,
        SMALL_ROUND,
        GaveWay,
        _Rearm,
        _Rounds,
        _tracked,
    )

    target = targets.start(HERE / "programs" / "refcounts.c")
    rearm = _Rearm(target.pid)
    gave = None
    try:
        with tracked_writes(open_target(target.pid)):
            rearm.start(read_maps(target.pid))
            tracked = _tracked(read_maps(target.pid), [])
            for _ in range(ATTEMPTS):
                _writers_ran(target.pid, tracked)
                try:
                    ended = _Rounds(target.pid, [], rearm, 0.0, 1.0).run(
                        b"", bytearray(), bytearray()
                    )
                except GaveWay as e:
                    gave = e
                    break
                rounds = ended[0]
                assert rounds and rounds[-1] <= SMALL_ROUND < rounds[0], rounds
    finally:
        rearm.close()
    assert gave is not None, f"the rounds never gave way in {ATTEMPTS} tries"
    e = gave
    # Given up after the second round, which did not shrink to half the
    # first, or (the writers starved of a core meanwhile) after the last.
    assert e.probe_ms == 0 and 2 <= len(e.rounds) <= MAX_ROUNDS, e.rounds
    assert all(n > SMALL_ROUND for n in e.rounds), e.rounds
    assert len(e.rounds) == MAX_ROUNDS or e.rounds[1] > e.rounds[0] * SHRINK, e.rounds
    assert "MB written per round" in str(e)
    _left_as_found(target)


def _classic_copy() -> str:
    """Why refcounts.c cannot be made a target whose copy would be the
    classic one (auto marks such a target concurrently): "" when it can,
    dropping root."""
    if os.geteuid() != 0:
        return "needs root to start a target that drops it"
    with open("/proc/sys/vm/unprivileged_userfaultfd") as f:
        if f.read().strip() == "1":
            return "vm.unprivileged_userfaultfd: every target's copy is copy-on-write"
    return ""


classic_copy = pytest.mark.skipif(bool(_classic_copy()), reason=_classic_copy())


@needs_tracking
@classic_copy
def test_auto_forks_a_target_writing_all_over_its_heap_and_says_why(targets):
    """Under auto the same heap (past CONCURRENT_FROM_BYTES), its copy the
    classic one, is marked concurrently first; its rounds do not converge,
    so the scan forks instead, with exactly the dropped blocks, and the
    note says why. No second stop was taken: the report's pause is the
    fork's alone."""
    from unreachable.scan.plan import CONCURRENT_FROM_BYTES

    target = targets.start(HERE / "programs" / "refcounts.c", "unprivileged")
    facts = gather_facts(target.pid, ScanOptions())
    assert facts.anonymous_bytes >= CONCURRENT_FROM_BYTES
    assert plan(facts, ScanOptions())[0].snapshot == "concurrent"
    report = scan(target.pid, ScanOptions())
    exact(target, report)
    assert report.snapshot == "fork", report.snapshot_note
    assert "concurrent mark did not converge:" in report.snapshot_note
    assert "; forked instead" in report.snapshot_note
    assert "two stops" not in report.snapshot_note
    _left_as_found(target)


@needs_tracking
@classic_copy
def test_cli_auto_says_why_it_forked(targets):
    """The same through the CLI: exit 1 (leaks found), the fork's report,
    and the note in its JSON."""
    target = targets.start(HERE / "programs" / "refcounts.c", "unprivileged")
    out = subprocess.run(
        [sys.executable, "-m", "unreachable.cli.main", "scan", str(target.pid), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 1, out.stderr
    doc = json.loads(out.stdout)
    assert doc["snapshot"] == "fork" and doc["leak_count"] == target.int("leak_count")
    assert "concurrent mark did not converge" in doc["snapshot_note"]
    assert "; forked instead" in doc["snapshot_note"], doc["snapshot_note"]
    _left_as_found(target)


@needs_tracking
@classic_copy
def test_auto_takes_the_concurrent_mark_of_an_idle_big_heap(targets):
    """The same heap, nobody writing: the rounds converge, the mark stops
    the target twice, and its last stop reads next to nothing. A target
    whose copy would be copy-on-write is copied instead."""
    from unreachable.scan.concurrent import SMALL_ROUND, concurrent_sweep

    target = targets.start(HERE / "programs" / "refcounts.c", "idle", "unprivileged")
    report = scan(target.pid, ScanOptions())
    exact(target, report)
    assert report.snapshot == "concurrent", report.snapshot_note
    assert "two stops" in report.snapshot_note
    done = concurrent_sweep(open_target(target.pid), give_way_ms=1e9)
    assert done.rounds[-1] <= SMALL_ROUND, done.rounds
    _left_as_found(target)
    copied = targets.start(HERE / "programs" / "refcounts.c", "idle")
    report = scan(copied.pid, ScanOptions())
    exact(copied, report)
    assert report.snapshot == "copy", report.snapshot_note
    _left_as_found(copied)


@needs_tracking
def test_a_mapping_born_during_the_mark_is_read_by_a_round_not_by_the_stop(targets):
    """A mapping made after the helper registered the target's carries no
    write protection: a round's protecting walk skips it (the kernel passes
    over a mapping without it), so the last stop read all its pages. The
    scanner registers it with the helper's userfaultfd: the next round
    lists and protects it, and the stop lists only what is written again."""
    from tests.support.tracking import write_protected
    from unreachable.process.maps import read_maps
    from unreachable.scan.concurrent import _Rearm, _tracked

    target = targets.start(HERE / "programs" / "refcounts.c", "idle")
    pid = target.pid
    rearm = _Rearm(pid)

    def listed(ranges: bytes, clear: bool) -> int:
        runs = _native.written_pages(pid, ranges, clear)
        return sum(e - b for b, e in struct.iter_unpack("<QQ", runs))

    try:
        with tracked_writes(open_target(pid)):
            rearm.start(read_maps(pid))
            assert rearm.fd >= 0
            target.send("map")
            addr = int(target.read_line().split()[1], 16)
            span = struct.pack("<QQ", addr, addr + (32 << 20))
            # Not registered: no round lists it, and the stop lists it whole.
            assert listed(span, True) == 0
            assert listed(span, False) == 32 << 20
            maps = read_maps(pid)
            rearm.arm(maps, [])
            assert rearm.registered >= 32 << 20
            assert any(addr == int(h.split("-")[0], 16) for h in write_protected(pid))
            assert listed(_tracked(maps, []), True) >= 32 << 20
            assert listed(span, False) < 1 << 20
    finally:
        rearm.close()
    _left_as_found(target)


@needs_tracking
def test_shared_memory_is_read_after_the_last_stop_as_a_fork_reads_it(targets):
    """Shared memory carries no write tracking of this process (another
    process may write it through its own page tables): its pages are read
    after the last stop is released, as a fork or copy snapshot reads them,
    rather than listed whole by every round and read in the stop (a PHP
    opcache's 128 MiB paused php-fpm 105-128 ms). Its words still keep
    what they point to."""
    from unreachable.scan.concurrent import concurrent_sweep

    target = targets.start(HERE / "programs" / "shared_memory.c")
    done = concurrent_sweep(open_target(target.pid))
    shared = target.int("shared_bytes")
    assert all(n < shared for n in done.rounds), done.rounds
    assert (done.result.unreachable_count, done.result.unreachable_bytes) == (
        target.int("leak_count"),
        target.int("leak_bytes"),
    )
    _left_as_found(target)


@needs_tracking
def test_a_leak_made_while_the_mark_runs_is_never_reported(targets):
    """The allocation set is the registry of the first stop: leaker.c drops a
    block every 100 us from its start and all through the scan. Each one
    dropped before that stop ended is reported (but the newest, whose
    address a register may still hold at that stop: a root there, as in
    every mode), none allocated after it (the next scan's), and nothing it
    did not drop. The target's notes and the scanner's share one clock: an
    order of events, not a length of time. The stop's end is the moment its
    release began: once released, the thread may allocate before the
    scanner runs again (a loaded machine), which a time taken after the
    release counted as before it."""
    from unreachable.scan.concurrent import concurrent_sweep

    target = targets.start(HERE / "programs" / "leaker.c")
    done = concurrent_sweep(open_target(target.pid))
    records = _native.abi_decode_array("ur_leak_record", done.result.leaks)
    reported = {int(r["begin"]) for r in records}
    target.send("d")
    notes = []
    while (line := target.read_line()) != "END":
        addr, before, after = line.split()
        notes.append((int(addr, 16), int(before), int(after)))
    released = done.released_at[0] * 1e9
    dropped = [a for a, _, after in notes if after < released]
    made_after = {a for a, before, _ in notes if before > released}
    assert dropped and made_after
    assert set(dropped[:-1]) <= reported, (len(dropped), len(set(dropped) - reported))
    assert not reported & made_after
    assert reported <= {a for a, _, _ in notes}


@needs_tracking
def test_a_stale_word_in_a_freed_block_on_a_written_page_keeps_nothing(targets):
    """freed_holder.c frees the only holder of a block, whose address stays
    in the free chunk, and keeps writing that page: the word is no root at
    the stop, so the concurrent mark reports the block as stopped mode does."""
    target = targets.start(HERE / "programs" / "freed_holder.c")
    exact(target, scan(target.pid, ScanOptions(snapshot="stopped")))
    for _ in range(3):
        exact(target, scan(target.pid, ScanOptions(snapshot="concurrent")))


@needs_tracking
def test_the_second_registry_copy_decodes_the_candidates_as_a_whole_copy(targets):
    """The copy the second stop checks candidates against holds, of the
    size maps, only the pages of the candidates' entries: it says of every
    candidate (blocks of all three levels, and pairs the registry does not
    hold) what a copy of the whole registry says, from far fewer pages."""
    target = targets.start(HERE / "programs" / "size_levels.c")
    pid = target.pid
    addr, spans, allocs, pages_whole = _whole_registry(pid)
    held = {(allocs[i], allocs[i + 1]) for i in range(0, len(allocs), 2 * 97)}
    pairs = sorted(held | {(b, s + 1) for b, s in list(held)[::4]})
    cands = _pairs(*pairs)
    bodies, pages = _native.size_map_pages(pid, addr, cands)
    sparse = _registry_copy(pid, _candidate_spans(spans, _decoded(bodies), _decoded(pages)))
    try:
        pages_sparse = sparse.stats["pages_read"]
        sparse_zeroed = sparse.stats["pages_zeroed"]
        # As the second stop brings it up to date: the pages it holds, in
        # a few walks of the registry's spans (nothing tracks the writes
        # here, so every page held is read again), and no other.
        sparse.reset_stats()
        sparse.sync(_sync_ranges(_held_spans(spans, spans)), refresh=True)
        sparse.finish()
        got = _native.pairs_in(cands, read_registry(sparse, addr).allocs.cast("B"))
        refreshed = sparse.stats["pages_read"] + sparse.stats["pages_zeroed"]
    finally:
        sparse.close()
    assert got == _native.pairs_in(cands, allocs.cast("B"))
    assert got == bytes(p in held for p in pairs)
    assert pages_sparse * 4 < pages_whole
    assert refreshed <= pages_sparse + sparse_zeroed


@needs_tracking
def test_the_second_registry_copy_knows_every_block_over_a_pending_word(targets):
    """The re-mark's pending words are roots if a block of the second stop
    holds them: the copy, candidates' pages aside, holds the entries of
    every block that could hold an address it is asked about (all three
    levels, a block reaching in from the megabyte before), and so finds
    the same blocks over those addresses as a copy of the whole registry."""
    target = targets.start(HERE / "programs" / "size_levels.c")
    pid = target.pid
    addr, spans, allocs, pages_whole = _whole_registry(pid)
    blocks = sorted((allocs[i], allocs[i + 1]) for i in range(0, len(allocs), 2))
    # Words inside blocks of every size (a block's first and last word and
    # one past its end, which may lie in the next block or in none).
    picked = blocks[:: max(1, len(blocks) // 300)]
    words = sorted({w for b, n in picked for w in (b, b + n - 8, b + n + 8)})
    bodies, _ = _native.size_map_pages(pid, addr, b"")
    around = _native.size_map_pages_around(pid, addr, _pairs(*((w, w + 8) for w in words)))
    sparse = _registry_copy(pid, _candidate_spans(spans, _decoded(bodies), _decoded(around)))
    try:
        sparse.finish()
        got = read_registry(sparse, addr).allocs
        pages_sparse = sparse.stats["pages_read"]
    finally:
        sparse.close()
    known = sorted((got[i], got[i + 1]) for i in range(0, len(got), 2))

    def over(table: list[tuple[int, int]], w: int) -> tuple[int, int] | None:
        i = bisect.bisect_right(table, (w, 1 << 64)) - 1
        return table[i] if i >= 0 and table[i][0] <= w < sum(table[i]) else None

    assert all(over(known, w) == over(blocks, w) for w in words)
    assert sum(over(blocks, w) is not None for w in words) > len(words) // 2
    assert pages_sparse < pages_whole


def _whole_registry(pid: int) -> tuple[int, list[tuple[int, int, int]], memoryview, int]:
    """The registry's descriptor, spans, decoded pairs and pages, from a
    copy of all of it."""
    addr = open_target(pid).shim.descriptor_addr
    spans = _registry_spans(pid, addr, read_maps(pid))
    whole = _registry_copy(pid, spans)
    try:
        whole.finish()
        return addr, spans, read_registry(whole, addr).allocs, whole.stats["pages_read"]
    finally:
        whole.close()


def _decoded(packed: bytes) -> list[tuple[int, int]]:
    return [(r["begin"], r["end"]) for r in _native.abi_decode_array("ur_range", packed)]


@needs_tracking
def test_the_probe_keeps_the_pages_written_before_the_first_mark(targets):
    """moved_at_arming.c moves the only pointer to an old block into a new
    block as soon as its pages are write-protected: only the pages written
    since the arming show it, and the probe before auto's first mark listed
    (and protected again) those pages. Their writes must reach the first
    round: no leak, with the probe and without."""
    target = targets.start(HERE / "programs" / "moved_at_arming.c")
    # Before the probe's pages reached the first round: 1 leak (3,000
    # bytes) in 15 of 16 such scans; the mark without the probe: 0 of 16.
    for _ in range(8):
        report = _probed_scan(target.pid)
        exact(target, report)
        assert report.snapshot == "concurrent"
        wait_untracked(target.pid)
        report = scan(target.pid, ScanOptions(snapshot="concurrent"))
        exact(target, report)
        wait_untracked(target.pid)
    assert target.alive() and target.tracer() == 0
