"""Run the native mark-and-sweep and fold over the registry and roots."""

from __future__ import annotations

import bisect
import struct
from dataclasses import dataclass

from unreachable import _native
from unreachable.allocations.registry import Registry
from unreachable.roots.classify import Roots

LEAK_RECORD = struct.Struct("<IIQQ")  # index, reserved, referenced_count, referenced_size


@dataclass(frozen=True, slots=True)
class SweepResult:
    unreachable_count: int  # every unreachable allocation
    unreachable_bytes: int
    # One record per member of a dominator component of the unreachable
    # graph, in address order (LEAK_RECORD). Kept packed: a heap with a
    # million leaks must not become a million Python objects.
    leaks: bytes
    excluded: frozenset[int]  # registry indices never to report (in-flight blocks)
    bytes_scanned: int
    pages_skipped: int
    mark_ms: float
    fold_ms: float


def _index_of(registry: Registry, addr: int) -> int | None:
    i = bisect.bisect_left(range(registry.count), addr, key=registry.begin)
    return i if i < registry.count and registry.begin(i) == addr else None


def sweep(mem_pid: int, registry: Registry, roots: Roots, register_words: bytes) -> SweepResult:
    # A block a paused thread is inside malloc/free/realloc for is treated as
    # a root and never reported: its pointer may live only in that thread's
    # locals, or glibc may be halfway through moving it.
    inflight = {p: s for t in registry.threads for p, s in t.inflight_blocks()}
    ranges = list(roots.ranges) + [(p, p + max(s, 1)) for p, s in inflight.items()]
    packed_ranges = b"".join(struct.pack("<QQ", b, e) for b, e in ranges)
    raw = _native.sweep(mem_pid, registry.allocs.cast("B"), packed_ranges, register_words)
    excluded = frozenset(i for p in inflight if (i := _index_of(registry, p)) is not None)
    count = len(raw["unreachable"]) // 4
    total = raw["unreachable_bytes"]
    if excluded:
        dropped = [i for i in memoryview(raw["unreachable"]).cast("I") if i in excluded]
        count -= len(dropped)
        total -= sum(registry.size(i) for i in dropped)
    return SweepResult(
        unreachable_count=count,
        unreachable_bytes=total,
        leaks=raw["leaks"],
        excluded=excluded,
        bytes_scanned=raw["bytes_scanned"],
        pages_skipped=raw["pages_skipped"],
        mark_ms=raw["mark_ns"] / 1e6,
        fold_ms=raw["fold_ns"] / 1e6,
    )
