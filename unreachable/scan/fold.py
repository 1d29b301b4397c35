"""Stage fold: the leaks the report lists (fold/: dominator components
folded, plain leaks folded by type), and the first bytes of those asked for."""

from __future__ import annotations

from dataclasses import dataclass

from unreachable.fold.dedup import Leak, dedup
from unreachable.fold.types import fold_leaks
from unreachable.process.maps import Mapping
from unreachable.process.memory import Memory, memory_reader
from unreachable.scan.options import CONTENTS_BYTES, ScanOptions
from unreachable.sweep.mark import SweepResult


@dataclass(slots=True, eq=False, repr=False)
class Folded:
    """The report's entries, with their types and first bytes."""

    leaks: list[Leak]
    types: dict[int, str]  # the C++ type of an entry's first block, by address
    contents: dict[int, bytes]  # an entry's first bytes, by address, where read


def _read_contents(memory: Memory, addr: int, size: int) -> bytes:
    with memory_reader(memory) as read:
        try:
            return read(addr, min(size, CONTENTS_BYTES))
        except OSError:
            return b""


def fold(
    result: SweepResult,
    options: ScanOptions,
    memory: Memory,
    mappings: list[Mapping],
    pid: int = 0,
    typed: bool = True,
) -> Folded:
    """pid: the live process whose files name the leaks' types (0: the
    files the mappings name). typed=False: no types looked for (a core's
    files may not be the process's). Contents: every entry's with
    options.contents, else those of the first options.sample_contents
    entries that have no backtrace (a leak without one is known by its
    bytes)."""
    if typed:
        leaks, types = fold_leaks(
            result.leaks, options.limit, memory, pid, mappings, not options.contents
        )
    else:
        leaks, types = dedup(result.leaks, options.limit), {}
    contents = {
        leak.begin: _read_contents(memory, leak.begin, leak.size)
        for i, leak in enumerate(leaks)
        if options.contents or (i < options.sample_contents and not leak.stack_id)
    }
    return Folded(leaks, types, contents)
