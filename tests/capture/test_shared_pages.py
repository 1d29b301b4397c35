"""Reading a target's memory (native/scanner/memory.c, read_span):
process_vm_readv for the pages the target maps alone while every thread of
it is held stopped (native/scanner/pin_gate.h), /proc/PID/mem for every
other page and whenever it runs. process_vm_readv pins what it reads, and
the kernel unshares an anonymous page shared copy-on-write before it pins
it: read so, a page the target shares with a child of its own would be
copied into the target, and a running target may fork between the pagemap
read that said a page was its alone and the pin. The pages shared with a
child must stay shared through every scan, and the bytes read must be
those of the target either way."""

from __future__ import annotations

import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support.holder import chained_blocks
from tests.support.tracking import copy_unsupported, wait_untracked
from unreachable import _native
from unreachable.capture.target import open_target
from unreachable.capture.write_tracking import tracked_writes
from unreachable.process.maps import read_maps
from unreachable.scan import ScanOptions, scan

HERE = Path(__file__).parent
BLOCK = 64
SIZE = 16 << 20
BREAK_EVERY = 1000  # a block whose first word is zero: the chain after it is unreachable

# SIZE bytes of private anonymous memory laid out as 64-byte "blocks", each
# one's first word pointing to the next, every BREAK_EVERY-th pointing
# nowhere. With a child, it forks one that waits for it to end: every page
# is then shared copy-on-write. Prints the address and the child's pid.
HOLDER = (
    chained_blocks(SIZE, BLOCK, BREAK_EVERY, flags="mmap.MAP_PRIVATE")
    + """
import os, sys
child = 0
if sys.argv[1] == "child":
    r, w = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(w)
        while os.read(r, 1):
            pass
        os._exit(0)
    os.close(r)
print(addr, child, flush=True)
sys.stdin.read()
"""
)


@contextmanager
def holder(kind: str) -> Iterator[tuple[int, int, int]]:
    """(pid, the memory's address, the child's pid or 0) while it runs."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, kind],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        addr, child = (int(v) for v in proc.stdout.readline().split())
        yield proc.pid, addr, child
    finally:
        proc.kill()
        proc.wait()


def smaps_kib(pid: int, field: str, addr: int | None = None) -> int:
    """A field of the mapping that begins at addr, or of all of them."""
    total, inside = 0, False
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                inside = addr is None or int(head.split("-")[0], 16) == addr
            elif inside and head == field + ":":
                total += int(line.split()[1])
    return total


@contextmanager
def held_stopped(pid: int, stopped: bool = True) -> Iterator[None]:
    """Every thread of pid stopped by this process meanwhile (when stopped)."""
    session = _native.Session(pid) if stopped else None
    try:
        if session:
            session.stop()
        yield
    finally:
        if session:
            session.close()


def sweep(pid: int, addr: int, live: bool) -> dict:
    n = SIZE // BLOCK
    allocs = b"".join(struct.pack("<QQ", addr + i * BLOCK, BLOCK) for i in range(n))
    result = _native.sweep(
        pid, allocs, b"", struct.pack("<Q", addr), cache_mb=4, threads=2 if live else 1, live=live
    )
    # Everything past the first break is unreachable: the bytes read are the target's.
    assert result["unreachable_count"] == n - BREAK_EVERY
    return dict(result)


@pytest.mark.parametrize("live", [False, True])
@pytest.mark.parametrize("stopped", [True, False])
def test_the_pages_a_target_maps_alone_are_read_by_process_vm_readv_while_stopped(live, stopped):
    with holder("alone") as (pid, addr, _), held_stopped(pid, stopped):
        result = sweep(pid, addr, live)
    if stopped:
        assert result["bytes_vm_read"] >= SIZE, result["bytes_vm_read"]
    else:
        assert result["bytes_vm_read"] == 0, result["bytes_vm_read"]


@pytest.mark.parametrize("live", [False, True])
def test_pages_shared_with_a_child_of_the_target_stay_shared(live):
    with holder("child") as (pid, addr, child):
        shared = smaps_kib(child, "Shared_Dirty", addr)
        private = smaps_kib(pid, "Private_Dirty", addr)
        assert shared >= SIZE // 1024
        with held_stopped(pid):
            result = sweep(pid, addr, live)
        assert smaps_kib(child, "Shared_Dirty", addr) == shared
        assert smaps_kib(pid, "Private_Dirty", addr) == private
    # Only the chunks the mapping shares with its neighbours, at its ends.
    assert result["bytes_vm_read"] <= 2 << 20, result["bytes_vm_read"]


@pytest.mark.parametrize("threads", [1, 2])
def test_spans_read_in_a_pause_leave_pages_shared_with_a_child(threads):
    """read_spans: what a fork snapshot lacks, and the concurrent mark's
    written pages, read while the target is stopped."""
    with holder("child") as (pid, addr, child):
        shared = smaps_kib(child, "Shared_Dirty", addr)
        out = bytearray(SIZE)
        with held_stopped(pid):
            got = _native.read_spans(pid, struct.pack("<QQ", addr, addr + SIZE), out, threads)
        assert smaps_kib(child, "Shared_Dirty", addr) == shared
    assert got == SIZE
    firsts = struct.unpack(f"<{SIZE // 8}Q", out)[:: BLOCK // 8]
    assert firsts[0] == addr + BLOCK and firsts[BREAK_EVERY - 1] == 0


@pytest.mark.skipif(bool(copy_unsupported()), reason=copy_unsupported())
@pytest.mark.parametrize("mode", ["copy", "concurrent"])
def test_a_target_sharing_its_heap_with_a_child_is_scanned_without_copying_it(targets, mode):
    target = targets.start(HERE / "programs" / "shared_child.c", "20000")
    child = target.int("child")
    shared = smaps_kib(child, "Shared_Dirty")
    assert shared >= 20000
    report = scan(target.pid, ScanOptions(snapshot=mode))
    assert report.snapshot == mode
    assert (report.leak_count, report.leak_bytes) == (5, target.int("leak_bytes"))
    # The child's pages the target wrote while scanned (the shim's, its
    # helper's stack) are no longer shared: a few, where a copy of the heap
    # would have taken 20 MB.
    assert smaps_kib(child, "Shared_Dirty") > shared - 1024, (
        shared,
        smaps_kib(child, "Shared_Dirty"),
    )


@pytest.mark.skipif(bool(copy_unsupported()), reason=copy_unsupported())
def test_pinned_reads_neither_clear_nor_hide_the_write_tracking(targets):
    """The concurrent mark's rounds list the pages written since the last by
    their write protection (userfaultfd WP_ASYNC). A read that pins the
    pages (process_vm_readv) must leave them protected, and a write after it
    must still be listed."""
    from unreachable.scan.concurrent import _tracked

    target = targets.start(HERE / "programs" / "shared_child.c", "20000", "0")
    pid = target.pid
    heap = next(m for m in read_maps(pid) if m.path == "[heap]")
    with tracked_writes(open_target(pid)):
        ranges = _tracked(read_maps(pid), [])
        _native.written_pages(pid, ranges, True)
        allocs = struct.pack("<QQ", heap.start, heap.end - heap.start)
        # The concurrent mark's last stop: the pages read pinned.
        with held_stopped(pid):
            read = _native.sweep(pid, allocs, b"", b"", cache_mb=4, threads=2, live=True)
        assert read["bytes_vm_read"] >= (heap.end - heap.start) // 2, read["bytes_vm_read"]
        # The shim's helper writes a page or two of the heap meanwhile; a
        # read that cleared the protection would list all 20 MB of it.
        listed = _pairs(_native.written_pages(pid, ranges, True))
        in_heap = sum(
            min(e, heap.end) - max(b, heap.start)
            for b, e in listed
            if b < heap.end and e > heap.start
        )
        assert in_heap <= 64 << 10, listed
        # A write the target's kernel makes for it, as a write of its own.
        page = heap.start + (heap.end - heap.start) // 2 & ~4095
        with open(f"/proc/{pid}/mem", "r+b", buffering=0) as mem:
            mem.seek(page)
            word = mem.read(8)
            mem.seek(page)
            mem.write(word)
        listed = _pairs(_native.written_pages(pid, ranges, True))
        assert [r for r in listed if r[0] <= page < r[1]], listed
    wait_untracked(pid)


def _pairs(packed: bytes) -> list[tuple[int, int]]:
    return list(struct.iter_unpack("<QQ", packed))


def _children_most_private_dirty(target) -> tuple[int, int]:
    """fork_loop.c's largest child Private_Dirty (kB) and how many children
    it forked since it was last asked."""
    target.proc.stdin.write(b"r\n")
    target.proc.stdin.flush()
    fields = dict(kv.split("=") for kv in target.read_line().split())
    return int(fields["most"]), int(fields["children"])


def test_a_target_forking_while_it_is_read_keeps_its_pages_shared(targets):
    """fork_loop.c forks a child every few milliseconds, each living ~2 ms,
    while the concurrent mark reads its 64 MiB heap (a live sweep) over and
    over. A page pinned after a fork the pagemap read before it did not see
    is copied into the target, and the child's Private_Dirty grows by up to
    a chunk (1 MiB: +1024 kB against ~120 kB in 1 of ~15 children, pinned
    while it runs). Read through /proc/PID/mem while it runs, no child's
    grows past what it shows with nothing reading the target."""
    target = targets.start(HERE / "programs" / "fork_loop.c", "64")
    heap = next(m for m in read_maps(target.pid) if m.path == "[heap]")
    allocs = struct.pack("<QQ", heap.start, heap.end - heap.start)
    base, forked = 0, 0
    while forked < 20:  # children living while nothing reads the target
        time.sleep(0.2)
        most, n = _children_most_private_dirty(target)
        base, forked = max(base, most), forked + n
    most, forked, sweeps = 0, 0, 0
    while forked < 120 and most <= base + 256:
        _native.sweep(target.pid, allocs, b"", b"", cache_mb=4, threads=2, live=True)
        sweeps += 1
        seen, n = _children_most_private_dirty(target)
        most, forked = max(most, seen), forked + n
    assert most <= base + 256, (most, base, forked, sweeps)
    report = scan(target.pid, ScanOptions(snapshot="concurrent"))
    assert report.snapshot == "concurrent" and report.leak_count == 0
    most, forked = _children_most_private_dirty(target)
    assert most <= base + 256, (most, base, forked)
