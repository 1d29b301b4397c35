"""Reading a running target's memory (native/scanner/memory.c, read_span):
process_vm_readv for the pages the target maps alone, /proc/PID/mem for
every other. process_vm_readv pins what it reads, and the kernel unshares
an anonymous page shared copy-on-write before it pins it: read so, a page
the target shares with a child of its own would be copied into the target.
The pages shared with a child must stay shared through every scan, and the
bytes read must be those of the target either way."""

from __future__ import annotations

import struct
import subprocess
import sys
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
def test_the_pages_a_target_maps_alone_are_read_by_process_vm_readv(live):
    with holder("alone") as (pid, addr, _):
        result = sweep(pid, addr, live)
    assert result["bytes_vm_read"] >= SIZE, result["bytes_vm_read"]


@pytest.mark.parametrize("live", [False, True])
def test_pages_shared_with_a_child_of_the_target_stay_shared(live):
    with holder("child") as (pid, addr, child):
        shared = smaps_kib(child, "Shared_Dirty", addr)
        private = smaps_kib(pid, "Private_Dirty", addr)
        assert shared >= SIZE // 1024
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
