"""The shim's registry and glibc's walked heap count the same blocks: the
shim calls glibc's malloc, so one stop of a shimmed process can be read
both ways and must give the same addresses, the registry's requested size
within the chunk's usable size. once_tables.c is syslog-ng's heap in
small (tables built once by a library, worker threads come and go with
arenas, tcaches and fastbins of their own); its "fresh" start builds them
and its "kept" start does not, as syslog-ng with and without its persist
file (docs/glibc-heap.md, "Counted both ways")."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from unreachable.allocations.glibc_heap import find_libc
from unreachable.allocations.registry import read_registry
from unreachable.process.maps import read_maps
from unreachable.scan import ScanOptions, scan
from unreachable.scan.facts import gather_facts
from unreachable.scan.glibc import _stop_and_copy, walked

PROGRAM = Path(__file__).parent / "programs" / "once_tables.c"
TABLES = 4000  # the blocks a fresh start's tables hold
USABLE_SLACK = 23  # a chunk's usable bytes beyond the request, at most


def _both_at_one_stop(pid: int) -> tuple[dict[int, int], dict[int, int]]:
    """(glibc's live chunks, the shim's registry) of one stop: address -> size."""
    descriptor = gather_facts(pid, ScanOptions(snapshot="stopped")).target.shim.descriptor_addr
    got, allocs, _ = walked(pid, find_libc(pid, read_maps(pid)), _stop_and_copy)
    try:
        registry = read_registry(got.memory, descriptor)
        shim = {registry.begin(i): registry.size(i) for i in range(registry.count)}
    finally:
        got.close()
    return dict(struct.iter_unpack("<QQ", allocs)), shim


@pytest.mark.parametrize("start", ["fresh", "kept"])
def test_one_stop_read_both_ways_holds_the_same_blocks(targets, start):
    target = targets.start(PROGRAM, start)
    heap, shim = _both_at_one_stop(target.pid)
    assert sorted(heap) == sorted(shim), (
        [(hex(a), heap[a]) for a in sorted(set(heap) - set(shim))[:20]],
        [(hex(a), shim[a]) for a in sorted(set(shim) - set(heap))[:20]],
    )
    assert all(shim[a] <= heap[a] <= shim[a] + USABLE_SLACK for a in heap)
    assert target.alive() and target.tracer() == 0


def _counts(pid: int, snapshots: tuple[str, ...]) -> set[tuple[int, int, int]]:
    reports = [scan(pid, ScanOptions(snapshot=s)) for s in snapshots]
    return {(r.allocation_count, r.leak_count, r.leak_bytes) for r in reports}


def test_every_mode_both_ways_finds_the_exited_workers_caches(targets):
    """The four 4-byte caches the exited workers lost, in every mode with
    the shim and without it (24 usable bytes each); the tables count
    the same both ways."""
    found: dict[tuple[str, bool], set[tuple[int, int, int]]] = {}
    for start in ("fresh", "kept"):
        shimmed = targets.start(PROGRAM, start)
        found[start, True] = _counts(shimmed.pid, ("fork", "copy", "stopped", "concurrent"))
        plain = targets.start(PROGRAM, start, preload=False, wait_helper=False)
        found[start, False] = _counts(plain.pid, ("auto", "stopped"))
        for t in (shimmed, plain):
            assert t.alive() and t.tracer() == 0
    assert all(len(v) == 1 for v in found.values()), found
    (shim_fresh,), (plain_fresh,) = found["fresh", True], found["fresh", False]
    (shim_kept,), (plain_kept,) = found["kept", True], found["kept", False]
    assert shim_fresh[1:] == shim_kept[1:] == (4, 16)
    assert plain_fresh[1:] == plain_kept[1:] == (4, 96)
    assert shim_fresh[0] - shim_kept[0] == plain_fresh[0] - plain_kept[0] == TABLES
    # One block more under the shim: its helper thread's DTV, which ld.so
    # callocs through the shim's malloc when it starts the thread.
    assert shim_kept[0] == plain_kept[0] + 1, (shim_kept, plain_kept)
