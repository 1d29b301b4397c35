"""Stage roots: the memory that is roots (classify.py: ELF segments,
stacks, anonymous mappings, with the heap's parts, the shim's memory and
exited threads' stacks left out) and every source of root values
(roots/sources.py), in one list that the mark, the report's counts and the
reference graph all read."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial

from unreachable.capture.kept_out_of_fork import KeptOut
from unreachable.capture.kernel_held import KernelHeld
from unreachable.capture.stop_world import CapturedThread
from unreachable.process.maps import Mapping
from unreachable.process.memory import Memory, present_ranges
from unreachable.roots import sources
from unreachable.roots.classify import Roots, classify, stack_sps
from unreachable.roots.sources import RootValues
from unreachable.scan.allocations import Allocations


@dataclass(slots=True, eq=False, repr=False)
class RootInputs:
    """What a capture holds beyond memory and threads, where it has it."""

    shim_path: str  # the shim's own mappings are no roots
    # glibc's main_arena, the shim's .bss past its file: cut out of the roots
    allocator_state: list[tuple[int, int]] = field(default_factory=list)
    kernel_held: KernelHeld | None = None  # none in a core
    kept_out: KeptOut = field(default_factory=KeptOut)  # a fork's: what it lacks
    kept_candidates: bytes = b""  # of that, sources.kept_out_candidates
    altstacks: tuple[int, int] | None = None  # the shim's sigaltstack table and its size


@dataclass(slots=True, eq=False, repr=False)
class RootSet:
    """The roots a mark starts from."""

    ranges: Roots
    values: list[RootValues]

    @property
    def words(self) -> bytes:
        return b"".join(v.words for v in self.values)

    @property
    def sources(self) -> list[tuple[str, bytes]]:
        return [(v.source, v.words) for v in self.values]

    def counts(self) -> dict[str, int]:
        """The report's roots: bytes per kind of range, and per counted source."""
        return dict(self.ranges.kinds) | {v.source: v.reported for v in self.values if v.reported}


def find_roots(
    memory: Memory,
    mappings: list[Mapping],
    threads: Sequence[CapturedThread],
    allocations: Allocations,
    inputs: RootInputs,
) -> RootSet:
    ranges = classify(
        mappings,
        stack_sps(threads, allocations.registry),
        allocations.registry,
        inputs.shim_path,
        inputs.allocator_state,
        allocations.heap,
        partial(present_ranges, memory),
        memory,
    )
    held, spans = inputs.kernel_held, allocations.spans
    values = [
        sources.epoll_data(held),
        sources.timer_values(held),
        sources.signal_values(held),
        sources.pipe_data(held, mappings),
        sources.socket_data(held, mappings),
        sources.signal_stacks(memory, inputs.altstacks, threads, held),
        *sources.registers(threads, allocations.registry),
        sources.exited_threads_dtvs(ranges.dead_dtvs),
        sources.jit_code(memory, mappings, spans, inputs.kept_out),
        sources.kept_out_of_fork(inputs.kept_out, inputs.kept_candidates, spans),
    ]
    return RootSet(ranges, values)
