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
2^20 more), so a mark through a small cache takes a partial graph: each
chunk of blocks keeps up to 6 edges a block, and the blocks past that are
read again, in passes in address order, so the heap is read about twice.
A list of such blocks laid out at random takes a pass per link: a reader's
loads are bounded and the sweep ends with ERANGE instead of reading for
minutes.
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


def test_a_heap_over_every_graph_budget_is_read_about_twice(denser):
    """A partial graph: each chunk of blocks keeps edges up to 6 a block,
    the blocks past that are read again, in passes in address order; here
    every block is reached along the first words' chain, laid out in
    address order, so one pass reads them."""
    pid, addr, n = denser
    allocs, root = packed(addr, n, 2 * BLOCK), struct.pack("<Q", addr)
    whole = _native.sweep(pid, allocs, b"", root, cache_mb=64)
    assert whole["unreachable_count"] < n // 100  # the walk reaches nearly all
    for team in ({}, {"threads": 2, "live": True}):
        small = _native.sweep(pid, allocs, b"", root, cache_mb=CACHE_MB, **team)
        assert small["unreachable_count"] == whole["unreachable_count"]
        assert small["leaks"] == whole["leaks"]
        assert small["mark_passes"] >= 1
        # The graph's pass and one more: the 38 MiB heap twice, and the
        # pieces the readers' shares meet in.
        assert small["bytes_read"] <= 2 * n * 2 * BLOCK + (8 << 20)
        assert small["graph_bytes"] <= n * 29 + (4 << 20)


def random_chain(n: int, block: int) -> str:
    """Python source: n blocks of `block` bytes; the even ones each point to
    the next even one of a random order and to odd ones (holding nothing)
    at random: a list as deep as half the heap, laid out at random."""
    return f"""
import array, ctypes, mmap, random, sys
n, block = {n}, {block}
m = mmap.mmap(-1, n * block)
addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
rnd = random.Random(1)
order = list(range(0, n, 2))
rnd.shuffle(order)
order.remove(0)
order.insert(0, 0)  # the list's head: the first block
words = array.array("Q", bytes(n * block))
per = block // 8
for k, i in enumerate(order):
    if k + 1 < len(order):
        words[i * per] = addr + block * order[k + 1]
    for w in range(1, per):
        words[i * per + w] = addr + block * (2 * rnd.randrange(n // 2) + 1)
m[:] = words.tobytes()
print(addr, flush=True)
sys.stdin.read()
"""


def test_a_deep_list_laid_out_at_random_ends_the_mark():
    """Each link of such a list is read in a pass of its own unless its
    chunk is still in the cache: the reader's bound ends the sweep."""
    # 150,000 blocks of 256 bytes (38 MB): a link's 32 edges are over its
    # share of the budget (6 a block and 2^20 more, the leaves holding none).
    n = 150_000
    with python_holder(random_chain(n, 4 * BLOCK)) as (pid, addr):
        allocs, head = packed(addr, n, 4 * BLOCK), struct.pack("<Q", addr)
        with pytest.raises(OSError) as raised:
            _native.sweep(pid, allocs, b"", head, cache_mb=CACHE_MB)
        assert raised.value.errno == errno.ERANGE
