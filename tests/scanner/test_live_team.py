"""_native.sweep(live=True): a team marking a process that runs on, each
thread reading through a chunk cache of its own (the concurrent mark's
first mark). Same result as one thread, and each piece of memory read
about once: the reference graph's builders take address-ordered shares, so
two readers do not both load the same 1 MiB pieces."""

from __future__ import annotations

import struct
from collections.abc import Iterator

import pytest

from tests.support.holder import chained_blocks, python_holder
from unreachable import _native

BLOCK = 64
SIZE = 32 << 20
BREAK_EVERY = 1000  # a block whose first word is zero: the chain after it is unreachable

# Lays out SIZE bytes of 64-byte "blocks", each one's first word pointing
# to the next, every BREAK_EVERY-th pointing nowhere; prints the address.
HOLDER = (
    chained_blocks(SIZE, BLOCK, BREAK_EVERY)
    + """
import sys
print(addr, flush=True)
sys.stdin.read()
"""
)


@pytest.fixture
def holder() -> Iterator[tuple[int, int]]:
    with python_holder(HOLDER) as held:
        yield held


def test_live_team_marks_as_one_thread_reading_each_piece_about_once(holder):
    pid, addr = holder
    n = SIZE // BLOCK
    allocs = b"".join(struct.pack("<QQ", addr + i * BLOCK, BLOCK) for i in range(n))
    root = struct.pack("<Q", addr)
    alone = _native.sweep(pid, allocs, b"", root, cache_mb=4)
    team = _native.sweep(pid, allocs, b"", root, cache_mb=4, threads=2, live=True)
    assert team["mark_threads"] == 2
    # Everything past the first break is unreachable: one leak, the rest under it.
    assert alone["unreachable_count"] == n - BREAK_EVERY
    assert sorted(struct.iter_unpack("<I", team["unreachable"])) == sorted(
        struct.iter_unpack("<I", alone["unreachable"])
    )
    assert team["leaks"] == alone["leaks"]
    # One thread reads the 1 MiB pieces under the 32 MiB once (33 of them
    # unless the mapping is aligned). The team reads each piece once per
    # stretch of graph chunks a reader takes in a row: each builder's own
    # share from its front, and the one that finishes first the other's
    # from its back. Those three stretches meet at two places, and only the
    # piece at each meeting is read twice (by two readers, or by one that
    # read a cache's worth in between): two pieces more however the threads
    # are scheduled, as long as no reader evicts a piece it comes back to (a
    # builder taking a share from the back crosses from a piece into the
    # next, then returns: c/chunk_cache_test.c). Dealt to the builders in
    # turn, the graph's chunks had every piece read twice.
    assert alone["bytes_read"] <= SIZE + (1 << 20)
    assert team["bytes_read"] <= alone["bytes_read"] + (2 << 20)
