"""A test-only allocation source: a fixed list of blocks of a real process,
the rest of the registry (threads, the shim's own memory) the shim's. It
shows the seam (unreachable/allocations/source.py): this module, and its
line in SOURCES, are all a new source takes."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, replace

from unreachable.allocations.registry import Registry, read_registry
from unreachable.capture.stop_world import CapturedThread
from unreachable.process.maps import Mapping
from unreachable.process.memory import Memory
from unreachable.scan.facts import Facts


@dataclass(frozen=True, slots=True)
class FixedBlocks:
    descriptor_addr: int
    blocks: tuple[tuple[int, int], ...]  # (address, size), ascending
    name: str = "fixed blocks"

    def registry(
        self,
        memory: Memory,
        mappings: Sequence[Mapping],
        threads: Sequence[CapturedThread],
        entries: bool = True,
    ) -> Registry:
        shim = read_registry(memory, self.descriptor_addr, entries=False)
        packed = b"".join(struct.pack("<QQ", a, s) for a, s in self.blocks)
        return replace(
            shim,
            allocs=memoryview(packed).cast("Q"),
            stack_ids=memoryview(bytes(4 * len(self.blocks))).cast("I"),
        )


def fixed_blocks(blocks: Sequence[tuple[int, int]]):  # noqa: ANN201
    """SOURCES' entry: the source made from a target's facts."""

    def make(facts: Facts) -> FixedBlocks:
        assert facts.target is not None
        return FixedBlocks(facts.target.shim.descriptor_addr, tuple(sorted(blocks)))

    return make
