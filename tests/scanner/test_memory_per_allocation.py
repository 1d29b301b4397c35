"""What the scanner holds per allocation (docs/pause.md, "The scanner's
memory"), checked by structure, not by timing: the mark's own arrays as the
sweep counts them, and the chunk cache's resident size against a sparse
root range."""

from __future__ import annotations

import ctypes
import mmap
import os
import random
from array import array
from pathlib import Path

import pytest

from tests.support.holder import python_holder
from unreachable import _native
from unreachable.capture.target import open_target
from unreachable.process.maps import read_maps
from unreachable.sweep.mark import layout

N = 100_000


def _blocks(base: int, n: int, shuffled: bool) -> bytes:
    """n blocks of 16-1040 bytes (log-uniform, as bench/programs/peer_heap.c
    makes them) laid end to end from base, 16-aligned, each pointing to the
    one before it: (begin, size) pairs."""
    rnd = random.Random(7)
    pairs = []
    at = base
    for _ in range(n):
        bits = rnd.randint(4, 10)
        size = min((1 << bits) + rnd.randrange(1 << bits), 1040)
        pairs.append((at, size))
        at = (at + size + 16 + 15) & ~15
    if shuffled:
        rnd.shuffle(pairs)
    return array("Q", [v for p in pairs for v in p]).tobytes()


def _sweep_own_memory(shuffled: bool) -> _native.SweepResult:
    room = mmap.mmap(-1, N * 1200)
    base = (ctypes.addressof(ctypes.c_char.from_buffer(room)) + 15) & ~15
    allocs = _blocks(base, N, shuffled)
    words = memoryview(allocs).cast("Q")
    for i in range(1, N):  # a chain: every block a pointer to another
        ctypes.c_uint64.from_address(words[2 * i]).value = words[2 * (i - 1)]
    try:
        return _native.sweep(os.getpid(), allocs, b"", b"")
    finally:
        del words
        room.close()


def test_sorted_registry_is_indexed_in_place() -> None:
    """The registry comes sorted: the walker keeps only its mark bytes (no
    copy of begins, ends and indices: 20 bytes per allocation), and the
    index stays within its budget (the bucket table once took 64-128 bytes
    per allocation on such a heap)."""
    r = _sweep_own_memory(shuffled=False)
    assert r["allocation_count"] == N
    assert r["unreachable_count"] == N
    assert r["walker_bytes"] == N
    # Page entries: 8 bytes per allocation and 1 MiB; buckets: 12 per
    # allocation and a few fixed entries (native/mark/alloc_index.c).
    assert r["index_bytes"] <= 20 * N + (2 << 20)
    # 4 bytes per block and per edge: one edge per block here.
    assert r["graph_bytes"] <= 9 * N


def test_unsorted_pairs_are_copied_once() -> None:
    """Pairs in any order are sorted into one copy (pairs and indices), and
    the sweep finds the same."""
    r = _sweep_own_memory(shuffled=True)
    assert r["allocation_count"] == N
    assert r["unreachable_count"] == N
    assert r["walker_bytes"] == N + 16 * N + 4 * N
    assert r["index_bytes"] <= 20 * N + (2 << 20)


# Maps 512 MiB and touches one page of it: a sparse reservation, such as a
# big array a program reserves and fills as it grows.
SPARSE = """
import ctypes, mmap, sys
m = mmap.mmap(-1, 512 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
m[0:8] = b"\\1" * 8
print(ctypes.addressof(ctypes.c_char.from_buffer(m)), flush=True)
sys.stdin.read()
"""


def _status_mb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) // 1024
    raise AssertionError(field)


def _sweep_512_mib_root(program: str) -> tuple[_native.SweepResult, int]:
    """A stopped sweep of program's 512 MiB reservation as a root range:
    the sweep's result and how many MB the scanner grew by."""
    with python_holder(program) as (pid, addr):
        roots = array("Q", [addr, addr + (512 << 20)]).tobytes()
        present = array("Q", _native.present_ranges(pid, roots))
        if sum(present[1::2]) - sum(present[0::2]) >= 512 << 20:
            pytest.skip("no PAGEMAP_SCAN here (Linux 6.7): absent pages cannot be told")
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # VmHWM from here on
        before = _status_mb("VmRSS")
        r = _native.sweep(pid, b"", roots, b"", frozen=True, layout=layout(read_maps(pid)))
        return r, _status_mb("VmHWM") - before


def test_absent_pages_of_a_root_take_no_memory() -> None:
    """A root range the stopped sweep copies before it lets the target go:
    the pages the target does not have are zero in the copy without being
    written, so they take no memory (writing zeros into fresh cache memory
    took the whole 512 MiB)."""
    r, grew = _sweep_512_mib_root(SPARSE)
    assert r["bytes_read"] >= 512 << 20  # every chunk of the range was copied
    assert grew < 128, f"the scanner grew by {grew} MB over a 512 MiB root of one page"


# The same reservation with one page touched in every MiB: a heap of big
# blocks whose programs use only their first page.
SPREAD = """
import ctypes, mmap, sys
m = mmap.mmap(-1, 512 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
for i in range(512):
    m[i << 20] = 1
print(ctypes.addressof(ctypes.c_char.from_buffer(m)), flush=True)
sys.stdin.read()
"""


def test_a_sparse_range_takes_only_its_pages() -> None:
    """Every chunk of the range holds one page of the target's: the copy
    backs those pages, not the huge pages around them (the cache's huge
    pages took the whole 512 MiB, 2 MiB for every page written)."""
    r, grew = _sweep_512_mib_root(SPREAD)
    assert r["bytes_read"] >= 512 << 20
    assert grew < 64, f"the scanner grew by {grew} MB over 512 pages spread over 512 MiB"


class _PyBuffer(ctypes.Structure):
    _fields_ = [
        ("buf", ctypes.c_void_p),
        ("obj", ctypes.c_void_p),
        ("len", ctypes.c_ssize_t),
        ("itemsize", ctypes.c_ssize_t),
        ("readonly", ctypes.c_int),
        ("ndim", ctypes.c_int),
        ("format", ctypes.c_char_p),
        ("shape", ctypes.c_void_p),
        ("strides", ctypes.c_void_p),
        ("suboffsets", ctypes.c_void_p),
        ("internal", ctypes.c_void_p),
    ]


def _resident_pages(obj: object) -> tuple[int, int]:
    """(resident, all) pages under a buffer object's bytes (mincore)."""
    view = _PyBuffer()
    get = ctypes.pythonapi.PyObject_GetBuffer
    get.argtypes = [ctypes.py_object, ctypes.POINTER(_PyBuffer), ctypes.c_int]
    assert get(obj, ctypes.byref(view), 0) == 0
    try:
        page = mmap.PAGESIZE
        begin = view.buf & ~(page - 1)
        pages = (view.buf + view.len - begin + page - 1) // page
        vec = (ctypes.c_ubyte * pages)()
        libc = ctypes.CDLL(None, use_errno=True)
        assert libc.mincore(ctypes.c_void_p(begin), ctypes.c_size_t(pages * page), vec) == 0
        return sum(v & 1 for v in vec), pages
    finally:
        ctypes.pythonapi.PyBuffer_Release(ctypes.byref(view))


def test_the_registry_leaves_the_stack_ids_of_map_entries_untouched(targets) -> None:
    """Blocks a size map holds have no stack id, and the registry's id
    array is fresh zeroed memory: their ids are never written (4 bytes per
    allocation the kernel would zero and the scanner hold), also where a
    block mmap'ed alone, above them, is merged in among them."""
    programs = Path(__file__).parent.parent / "capture" / "programs"
    target = targets.start(programs / "shared_child.c", "40000", "0")
    raw = _native.read_registry(target.pid, open_target(target.pid).descriptor_addr, True, True)
    # Before anything reads them: a read maps the zero page, resident too.
    resident, pages = _resident_pages(raw["stack_ids"])
    n = len(memoryview(raw["stack_ids"])) // 4
    assert n > 40_000 and pages * 4096 >= 4 * n
    assert resident * 8 < pages, (resident, pages)
    assert not any(memoryview(raw["stack_ids"]).cast("I"))
