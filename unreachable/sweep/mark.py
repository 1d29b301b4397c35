"""Run the native mark-and-sweep and fold: inside the snapshot child when it
can (sweep/child.py), else over /proc/PID/mem from here."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from unreachable import _native
from unreachable.allocations.registry import Registry
from unreachable.process.maps import SPECIAL, Mapping
from unreachable.process.memory import Memory
from unreachable.roots.classify import Roots
from unreachable.sweep.child import LEAK_RECORD_SIZE, ChildSweeper, words

SweepPlace = Literal["child", "scanner"]

__all__ = ["LEAK_RECORD_SIZE", "SweepResult", "direct_ranges", "sweep", "sweep_in_child"]


@dataclass(slots=True, eq=False, repr=False)
class SweepResult:
    """What the mark found: the totals and the leaks, packed."""

    unreachable_count: int  # every unreachable allocation, in-flight blocks left out
    unreachable_bytes: int
    allocation_count: int  # distinct registered blocks
    allocation_bytes: int
    # One record per member of a dominator component of the unreachable
    # graph, in address order (abi.h ur_leak_record: begin, size, referenced count and
    # size, stack id), in-flight blocks left out. Kept packed: a heap with a
    # million leaks must not become a million Python objects.
    leaks: bytes | memoryview
    bytes_scanned: int
    pages_skipped: int
    mark_ms: float
    fold_ms: float
    place: SweepPlace  # where the mark ran: in the snapshot child, or here
    mark_threads: int = 1  # threads that marked, here or in the child
    # Passes over the blocks a partial reference graph left out, and the bytes
    # the mark's readers loaded from the process or copy (both 0 in the child,
    # which reads its own memory and keeps a whole graph).
    mark_passes: int = 0
    mark_bytes_read: int = 0
    # Graph mode (unreachable/retention): the root words that hit the heap and
    # the answers asked of the reference graph (_native.sweep's "graph").
    graph: dict[str, Any] | None = None


def _inflight(registry: Registry) -> dict[int, int]:
    # A block a paused thread is inside malloc/free/realloc for is treated as
    # a root and never reported: its pointer may live only in that thread's
    # locals, or glibc may be halfway through moving it.
    return {p: s for t in registry.threads for p, s in t.inflight_blocks()}


def _root_ranges(roots: Roots, inflight: dict[int, int]) -> list[tuple[int, int]]:
    return list(roots.ranges) + [(p, p + max(s, 1)) for p, s in inflight.items()]


def _may_hold_data(m: Mapping) -> bool:
    # A read-only file mapping (code, .rodata) is never a root and never holds
    # a block (roots/classify.py), but the 1 MiB chunks the sweep reads round
    # a library's .data out to its code: read through /proc/PID/mem, those
    # pages would be faulted into the target's page tables (a target's RSS
    # nearly doubled by one scan). Left out of the layout, they are not read.
    return m.readable and (m.writable or m.anonymous or m.path.startswith("[stack"))


def layout(mappings: Iterable[Mapping]) -> bytes:
    """The mappings that may hold roots or blocks, as the sweep's layout
    (struct ur_layout_span): pages outside them are not read."""
    return _native.abi_encode_array(
        "ur_layout_span", [(m.start, m.end, m.demand_zero) for m in mappings if _may_hold_data(m)]
    )


def sweep(
    memory: Memory,
    registry: Registry,
    roots: Roots,
    register_words: bytes,
    release: _native.Session | None = None,
    threads: int = 1,
    mappings: Sequence[Mapping] = (),
    frozen: bool = False,
    graph: dict[str, Any] | None = None,
) -> SweepResult:
    """The sweep from outside: the target (or its frozen child) read through
    /proc, or a copy snapshot. release: the stopped target's session, let go
    as soon as the memory the walk needs is read (native/scanner/sweep.c).
    threads: marking threads, used over a copy that no longer changes (a
    copy snapshot, the stopped target's once it is let go, or a frozen
    snapshot child's: frozen=True has what the walk needs read first).
    mappings: the process's; pages outside them, and absent pages of its
    demand-zero ones, are not read (reading them could grow a stack, or map
    the zero page into the process).
    graph: _native.sweep's graph-mode arguments (regions, value_regions,
    default_region, region_ids, why, dominators): the mark keeps its
    reference graph and answers them while the memory is still open."""
    inflight = _inflight(registry)
    packed_ranges = _native.abi_encode_array("ur_range", _root_ranges(roots, inflight))
    raw = _native.sweep(
        memory,
        registry.allocs.cast("B"),
        packed_ranges,
        register_words,
        stack_ids=registry.stack_ids.cast("B"),
        excluded=words(inflight),
        release=release,
        threads=threads,
        frozen=frozen,
        layout=layout(mappings),
        usable=registry.usable_sizes,
        **(graph or {}),
    )
    return from_native(raw)


def from_native(
    raw: _native.SweepResult, fold: _native.SweepResult | None = None, rescanned: int = 0
) -> SweepResult:
    """A mark made here: its counts, passes and reads from raw; what is
    unreachable from fold, a later fold of what the mark left (raw's own by
    default); rescanned: bytes read again after the mark (a re-mark's)."""
    fold = raw if fold is None else fold
    return SweepResult(
        unreachable_count=fold["unreachable_count"],
        unreachable_bytes=fold["unreachable_bytes"],
        allocation_count=raw["allocation_count"],
        allocation_bytes=raw["allocation_bytes"],
        leaks=fold["leaks"],
        bytes_scanned=raw["bytes_scanned"] + rescanned,
        pages_skipped=raw["pages_skipped"],
        mark_ms=raw["mark_ns"] / 1e6,
        fold_ms=fold["fold_ns"] / 1e6,
        place="scanner",
        mark_threads=raw["mark_threads"],
        mark_passes=raw["mark_passes"],
        mark_bytes_read=raw["bytes_read"],
        graph=raw.get("graph"),
    )


def direct_ranges(mappings: Sequence[Mapping]) -> list[tuple[int, int]]:
    """Where the child may load directly: readable memory, but not device
    files (a load could have side effects; /proc/PID/mem refuses them, and
    the child reads anything unlisted through /proc/self/mem as we would)."""
    return [
        (m.start, m.end)
        for m in mappings
        if m.readable
        and m.path not in SPECIAL
        and not (m.path.startswith("/dev/") and not m.path.startswith(("/dev/shm/", "/dev/zero")))
    ]


def sweep_in_child(
    child: ChildSweeper,
    registry: Registry,
    roots: Roots,
    register_words: bytes,
    mappings: Sequence[Mapping],
    threads: int = 1,
) -> SweepResult:
    """The sweep inside the snapshot child with `threads` marking threads
    (raises ChildSweepFailed)."""
    inflight = _inflight(registry)
    index = child.index()
    reply = child.sweep(
        _root_ranges(roots, inflight),
        register_words,
        list(inflight),
        direct_ranges(mappings),
        threads,
    )
    return SweepResult(
        unreachable_count=reply.unreachable_count,
        unreachable_bytes=reply.unreachable_bytes,
        allocation_count=index.allocation_count,
        allocation_bytes=index.allocation_bytes,
        leaks=reply.leaks,
        bytes_scanned=reply.bytes_scanned,
        pages_skipped=reply.pages_skipped,
        mark_ms=reply.mark_ms,
        fold_ms=reply.fold_ms,
        place="child",
        mark_threads=reply.mark_threads,
    )
