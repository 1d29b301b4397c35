"""The concurrent snapshot (scan/concurrent.py): a mark over the running
target, two short stops, no copy of its heap. No leak may be invented while
threads move, free and allocate blocks all through the mark, and none lost."""

from __future__ import annotations

import struct
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from tests.support.tracking import copy_unsupported, wait_untracked
from unreachable import _native
from unreachable.capture.copy_snapshot import COPY_FROM_BYTES
from unreachable.capture.target import open_target
from unreachable.capture.write_tracking import tracked_writes
from unreachable.errors import TargetUnscannable
from unreachable.scan import ScanOptions, scan
from unreachable.scan.facts import gather_facts
from unreachable.scan.plan import plan
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
    wait_untracked(target.pid)
    assert target.alive() and target.tracer() == 0


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
def test_auto_takes_no_concurrent_mark_and_forks_when_writes_cannot_be_tracked(targets):
    target = targets.start(HERE / "programs" / "mover.c")
    report = _auto_as_if_big(target.pid, ScanOptions())
    exact(target, report)
    assert report.snapshot in ("copy", "fork")
    wait_untracked(target.pid)
    # Under a budget only they might meet, auto plans a copy and a concurrent
    # mark first. Another scan holds the target's write tracking, which both
    # need: auto forks, and says why.
    with tracked_writes(open_target(target.pid)):
        report = _auto_as_if_big(target.pid, ScanOptions(max_pause_ms=0.01))
    exact(target, report)
    assert report.snapshot == "fork"
    assert "another scan is copying" in report.snapshot_note
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
    page outside the candidates is a root; one inside a candidate is only
    stored; a rescued candidate's stored words are followed; a gone one's
    stored words are roots."""
    a, b, c, d = 0x10000, 0x10100, 0x20000, 0x30000
    cands = _pairs((a, 32), (b, 32), (c, 32), (d, 32))
    state = bytearray(4)
    store = bytearray(4 * 32)
    # A written page at 0x10000 holds a's and b's bytes: a points to c, b is empty.
    page = bytearray(4096)
    page[0:8] = struct.pack("<Q", c)
    runs = _pairs((0x10000, 0x11000))
    # Inside a candidate: stored, not a root.
    assert _native.remark(cands, state, store, runs, page, b"", True) == 0
    assert bytes(store[0:8]) == struct.pack("<Q", c) and state == bytearray(4)
    # A register pointing into a's middle rescues a, and through its stored
    # bytes c.
    assert _native.remark(cands, state, store, b"", b"", _words(a + 8), True) == 2
    assert list(state) == [1, 0, 1, 0]
    # b freed and its memory reused: gone, its stored words become roots.
    store[32:40] = struct.pack("<Q", d + 31)
    state[1] = 3
    assert _native.remark(cands, state, store, b"", b"", b"", True) == 1
    assert list(state) == [1, 2, 1, 1]


def test_remark_reads_words_by_address_after_a_candidate_of_odd_size():
    """A candidate of 501 bytes ends 5 bytes into a word. The words after it
    on a written page, up to the next candidate, are roots at their own
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
    assert _native.remark(cands, state, store, runs, page, b"", True) == 1
    assert list(state) == [0, 1]
    # The word that straddles a's end is a root as well (conservative).
    state = bytearray(2)
    page[0x200:0x208] = bytes(8)
    page[0x1F0:0x1F8] = struct.pack("<Q", c)
    assert _native.remark(cands, state, store, runs, page, b"", True) == 1


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
