"""Where a scan's allocations come from: the seam between capture and the
rest of the pipeline.

An allocation source reads, from the memory a capture holds, the
registry the mark sweeps against (blocks in address order, their stack
ids, the threads' slots). The shim's registry is one (registry.py); the
glibc heap walked from outside (scan/glibc.py) and a core file's are
others. A new source is a module defining one, plus its line in SOURCES.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from unreachable.allocations.registry import Registry, read_registry, settle_gone_threads
from unreachable.process.maps import Mapping
from unreachable.process.memory import Memory

if TYPE_CHECKING:
    from unreachable.capture.stop_world import CapturedThread
    from unreachable.scan.facts import Facts


class AllocationSource(Protocol):
    @property
    def name(self) -> str:
        """The report's `allocations`: what the sizes are ("shim registry":
        requested sizes, with backtraces; "glibc heap": chunks' usable sizes)."""
        ...

    def registry(
        self,
        memory: Memory,
        mappings: Sequence[Mapping],
        threads: Sequence[CapturedThread],
        entries: bool = True,
    ) -> Registry:
        """entries=False: threads and regions only, for a snapshot child
        that reads the blocks itself (a source that cannot: ignore it)."""
        ...


@dataclass(slots=True, eq=False, repr=False)
class ShimRegistry:
    """The shim's registry, found at its descriptor (capture/descriptor.py)."""

    descriptor_addr: int
    name: str = "shim registry"

    def registry(
        self,
        memory: Memory,
        mappings: Sequence[Mapping],
        threads: Sequence[CapturedThread],
        entries: bool = True,
    ) -> Registry:
        registry = read_registry(memory, self.descriptor_addr, entries)
        settle_gone_threads(registry, memory, {t.tid for t in threads})
        return registry


def _shim_registry(facts: Facts) -> AllocationSource:
    assert facts.target is not None
    return ShimRegistry(facts.target.shim.descriptor_addr)


# The sources a plan may name (plan.Plan.allocations), each made from the
# target's facts. The glibc heap is walked by the captures that take one
# (scan/glibc.py, scan/core.py) and handed over made.
SOURCES: dict[str, Callable[[Facts], AllocationSource]] = {
    "shim registry": _shim_registry,
}
