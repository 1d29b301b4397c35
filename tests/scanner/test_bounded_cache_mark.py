"""_native.sweep through a chunk cache smaller than the heap (a target swept
stopped in place, a copy-on-write snapshot's readers): the mark must read
the heap about once whatever its order.

The shape is a server's caches (PowerDNS's query and packet caches: hash
buckets, tree and list nodes made in the order of the requests): small
blocks, each holding several pointers to blocks anywhere in the heap. A walk
from the roots reaches them in that random order and, through a cache that
cannot hold the heap, loads a 1 MiB chunk for nearly every block; the
reference graph's pass reads the heap once in address order. Such heaps
hold more pointers a block than the graph's default budget (3 a block and
2^20 more), so the budget for a mark through a small cache is larger (6);
past that too, a reader's loads are bounded and the sweep ends with ERANGE
instead of reading for minutes.
"""

from __future__ import annotations

import errno
import struct
from collections.abc import Iterator

import pytest

from tests.support.holder import python_holder
from unreachable import _native

BLOCK = 64
CACHE_MB = 4


def random_blocks(n: int, block: int) -> str:
    """Python source: n blocks of `block` bytes in one mapping, every word a
    pointer to a block picked at random; prints the mapping's address."""
    return f"""
import array, ctypes, mmap, random, sys
n, block = {n}, {block}
m = mmap.mmap(-1, n * block)
addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
pick = random.Random(1).randrange
m[:] = array.array("Q", (addr + block * pick(n) for _ in range(n * block // 8))).tobytes()
print(addr, flush=True)
sys.stdin.read()
"""


@pytest.fixture
def dense() -> Iterator[tuple[int, int, int]]:
    # 8 pointers a block: 2.4M edges, over the default budget (1.95M) and
    # within a small cache's (2.85M).
    n = 300_000
    with python_holder(random_blocks(n, BLOCK)) as (pid, addr):
        yield pid, addr, n


@pytest.fixture
def denser() -> Iterator[tuple[int, int, int]]:
    # 16 pointers a block: 4.8M edges, over every graph budget (2.85M).
    n = 300_000
    with python_holder(random_blocks(n, 2 * BLOCK)) as (pid, addr):
        yield pid, addr, n


def packed(addr: int, n: int, block: int) -> bytes:
    return b"".join(struct.pack("<QQ", addr + i * block, block) for i in range(n))


def test_a_heap_dense_in_pointers_is_read_about_once_through_a_small_cache(dense):
    pid, addr, n = dense
    allocs, root = packed(addr, n, BLOCK), struct.pack("<Q", addr)
    small = _native.sweep(pid, allocs, b"", root, cache_mb=CACHE_MB, threads=2, live=True)
    whole = _native.sweep(pid, allocs, b"", root, cache_mb=64)
    assert small["graph_bytes"] > 0  # marked along the graph, not by walking
    assert small["unreachable_count"] == whole["unreachable_count"]
    assert small["leaks"] == whole["leaks"]
    # Walking, it loaded a 1 MiB chunk for nearly every block: thousands of
    # times the heap's 19 MiB. The graph's readers read each piece about
    # once (two more where their shares meet: test_live_team.py).
    assert small["bytes_read"] <= n * BLOCK + (4 << 20)


def test_a_mark_that_would_reread_the_heap_ends(denser):
    pid, addr, n = denser
    allocs, root = packed(addr, n, 2 * BLOCK), struct.pack("<Q", addr)
    whole = _native.sweep(pid, allocs, b"", root, cache_mb=64)
    assert whole["unreachable_count"] < n // 100  # the walk reaches nearly all
    with pytest.raises(OSError) as raised:
        _native.sweep(pid, allocs, b"", root, cache_mb=CACHE_MB)
    assert raised.value.errno == errno.ERANGE
