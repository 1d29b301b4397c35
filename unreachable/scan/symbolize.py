"""Stage symbolize: the leaks' backtraces, read from the shim's stack
depot while the capture is held, then named from the mapped files once the
target runs again (symbolize/)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from unreachable import _native
from unreachable.fold.dedup import Leak
from unreachable.process.maps import Mapping
from unreachable.process.memory import Memory
from unreachable.symbolize.frame import Frame
from unreachable.symbolize.stacks import read_stacks

if TYPE_CHECKING:
    from unreachable.symbolize.unloaded import LoadedObject


@dataclass(slots=True, eq=False, repr=False)
class Backtraces:
    """The leaks' raw stacks and the objects to resolve them against."""

    stacks: dict[int, tuple[int, ...]] = field(default_factory=dict)  # return addresses by id
    loaded: list[LoadedObject] = field(default_factory=list)  # every object ever loaded
    dropped: int = 0  # allocations the shim kept no stack for, when a leak has none


def read_backtraces(memory: Memory, descriptor_addr: int, leaks: Sequence[Leak]) -> Backtraces:
    """The raw stacks of the leaks that have one (in the capture)."""
    stacks = read_stacks(
        memory, descriptor_addr, {leak.stack_id for leak in leaks if leak.stack_id}
    )
    dropped = _dropped(memory, descriptor_addr, leaks)
    if not stacks:
        return Backtraces(stacks, [], dropped)
    # The symbolizer's modules are imported for leaks with a backtrace only:
    # a scan's imports are part of its time.
    from unreachable.symbolize.unloaded import read_loaded_objects

    return Backtraces(stacks, read_loaded_objects(memory, descriptor_addr), dropped)


def _dropped(memory: Memory, descriptor_addr: int, leaks: Sequence[Leak]) -> int:
    """How many allocations the shim's stack table could not take (it grows
    as stacks come, and stops where it cannot: an address-space limit, the
    program's own seccomp filter), asked only when a leak has no stack."""
    if all(leak.stack_id for leak in leaks):
        return 0
    try:
        return _native.read_registry(memory, descriptor_addr, False, False)["stacks_dropped"]
    except (OSError, ValueError):
        return 0  # read whole before this, in the same capture: a target that went meanwhile


def dropped_note(dropped: int) -> str:
    if not dropped:
        return ""
    return (
        f"{dropped} allocations have no backtrace: the shim's stack table could not grow "
        "(an address-space limit, or the program's own seccomp filter)"
    )


@dataclass(slots=True, eq=False, repr=False)
class Symbolized:
    """The leaks' stacks as frames."""

    frames: dict[int, list[Frame]]  # by stack id
    note: str  # what was left unsymbolized, and why


def symbolize(
    pid: int | None,
    mappings: list[Mapping],
    backtraces: Backtraces,
    budget: float | None | bool,
    root: str | None = None,
) -> Symbolized:
    """pid None: no live process (a core): the mappings' paths are read as given."""
    dropped = dropped_note(backtraces.dropped)
    if not backtraces.stacks:
        return Symbolized({}, dropped)
    from unreachable.symbolize.frames import Symbolizer

    symbolizer = Symbolizer(pid, mappings, unloaded=backtraces.loaded, root=root, budget=budget)
    frames = symbolizer.symbolize(backtraces.stacks)
    return Symbolized(frames, "; ".join(n for n in (symbolizer.note, dropped) if n))
