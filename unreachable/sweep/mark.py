"""Run the native mark-and-sweep and fold over the registry and roots."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from unreachable import _native
from unreachable.allocations.registry import Registry
from unreachable.roots.classify import Roots


@dataclass(frozen=True, slots=True)
class FoldedLeak:
    """One member of a dominator component of the unreachable graph."""

    index: int  # into the registry
    referenced_count: int
    referenced_size: int


@dataclass(frozen=True, slots=True)
class SweepResult:
    unreachable: list[int]  # registry indices of every unreachable allocation
    leaks: list[FoldedLeak]
    bytes_scanned: int
    pages_skipped: int
    mark_ms: float
    fold_ms: float


def sweep(mem_pid: int, registry: Registry, roots: Roots, register_words: bytes) -> SweepResult:
    # A block a paused thread is inside malloc/free/realloc for is treated as
    # a root and never reported: its pointer may live only in that thread's
    # locals, or glibc may be halfway through moving it.
    inflight = {p: s for t in registry.threads for p, s in t.inflight_blocks()}
    ranges = list(roots.ranges) + [(p, p + max(s, 1)) for p, s in inflight.items()]
    packed_ranges = b"".join(struct.pack("<QQ", b, e) for b, e in ranges)
    raw = _native.sweep(mem_pid, registry.allocs.cast("B"), packed_ranges, register_words)
    unreachable = [
        i for i in memoryview(raw["unreachable"]).cast("I") if registry.begin(i) not in inflight
    ]
    leaks = [
        FoldedLeak(i, count, size)
        for i, _, count, size in struct.iter_unpack("<IIQQ", raw["leaks"])
        if registry.begin(i) not in inflight
    ]
    return SweepResult(
        unreachable=unreachable,
        leaks=leaks,
        bytes_scanned=raw["bytes_scanned"],
        pages_skipped=raw["pages_skipped"],
        mark_ms=raw["mark_ns"] / 1e6,
        fold_ms=raw["fold_ns"] / 1e6,
    )
