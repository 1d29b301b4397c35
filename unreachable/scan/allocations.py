"""Stage allocations: the registry the mark sweeps against, from the plan's
allocation source, and where in the anonymous mappings the heap lies
(roots/glibc_heaps.py): the roots stage leaves those parts out."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from unreachable.allocations.registry import Registry
from unreachable.allocations.source import AllocationSource
from unreachable.capture.stop_world import CapturedThread
from unreachable.process.maps import Mapping
from unreachable.process.memory import Memory
from unreachable.roots.glibc_heaps import MAX_LISTED, Span, heap_parts, registry_blocks_in
from unreachable.roots.heap_words import heap_spans
from unreachable.sweep.child import ChildSweeper


@dataclass(slots=True, eq=False, repr=False)
class Allocations:
    """The target's allocations and where in its memory they lie."""

    registry: Registry  # without entries when the snapshot child holds them
    heap: dict[Mapping, list[Span]]  # the heap's parts of anonymous mappings
    spans: list[Span]  # where blocks lie, sorted and merged: those parts and the brk heap
    source: str  # the report's `allocations`


def find_allocations(
    source: AllocationSource,
    memory: Memory,
    mappings: Sequence[Mapping],
    threads: Sequence[CapturedThread],
    child: ChildSweeper | None = None,
) -> Allocations:
    """child: the snapshot child sweeping itself, which indexes the blocks
    while this runs and says which lie where (raises ChildSweepFailed)."""
    registry = source.registry(memory, mappings, threads, entries=child is None)
    if child is not None:
        heap = heap_parts(memory, mappings, lambda ranges: child.blocks_in(ranges, MAX_LISTED))
    else:
        heap = heap_parts(memory, mappings, registry_blocks_in(registry))
    return Allocations(registry, heap, heap_spans(mappings, heap), source.name)
