"""heap_parts on a real process whose pools the kernel merged with glibc's
heap (tests/scan/programs/merged_pools.c): of each merged mapping, only the
mmap'ed chunk and the arena's heap are heap; the pools are the program's."""

from __future__ import annotations

from pathlib import Path

from unreachable.allocations.registry import read_registry
from unreachable.capture.target import open_target
from unreachable.process.maps import find_mapping, read_maps
from unreachable.roots.glibc_heaps import PAGE, heap_parts, registry_blocks_in

PROGRAMS = Path(__file__).parent.parent / "scan" / "programs"


def test_merged_pools_are_not_heap(targets):
    target = targets.start(PROGRAMS / "merged_pools.c")
    low, high, arena_pool = (int(target.info[k], 16) for k in ("low", "high", "arena_pool"))
    maps = read_maps(target.pid)
    registry = read_registry(target.pid, open_target(target.pid).shim.descriptor_addr)
    parts = heap_parts(target.pid, maps, registry_blocks_in(registry))

    chunk_mapping = find_mapping(maps, low)
    assert chunk_mapping is not None and chunk_mapping.end == high + PAGE
    # Between the pools: the large block's chunk, whole.
    assert parts[chunk_mapping] == [(low + PAGE, high)]

    arena_mapping = find_mapping(maps, arena_pool)
    assert arena_mapping is not None and arena_mapping.start == arena_pool
    assert parts[arena_mapping] == [(arena_pool + PAGE, arena_mapping.end)]

    # Every block lies in [heap] or in a part found; no part strays out of
    # its mapping.
    for m, spans in parts.items():
        assert m.anonymous and all(m.start <= b < e <= m.end for b, e in spans)
    spans = sorted(span for spans in parts.values() for span in spans)
    spans += [(m.start, m.end) for m in maps if m.path == "[heap]"]
    for i in range(registry.count):
        block = registry.begin(i)
        assert any(b <= block < e for b, e in spans), hex(block)


def test_a_vanished_process_leaves_every_mapping_with_a_block_heap(targets):
    target = targets.start(PROGRAMS / "merged_pools.c")
    maps = read_maps(target.pid)
    registry = read_registry(target.pid, open_target(target.pid).shim.descriptor_addr)
    target.stop()  # killed and reaped: its /proc/PID is gone
    parts = heap_parts(target.pid, maps, registry_blocks_in(registry))
    low = find_mapping(maps, int(target.info["low"], 16))
    assert low is not None and parts[low] == [(low.start, low.end)]
