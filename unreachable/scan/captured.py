"""What a snapshot strategy hands the later stages: the memory it holds
(Capture), what they need to know of the process it is of (Subject), and
where its allocations come from (an allocation source). The stages after
capture read these alone, so a new strategy is a module that makes them
and its line in scan/capture.py's CAPTURES."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from unreachable.allocations.source import AllocationSource
from unreachable.capture.stop_world import Capture
from unreachable.process.maps import Mapping


class Subject(Protocol):
    """The process a capture is of, as the later stages see it (a shim's
    Target, capture/target.py; a process without the shim, scan/glibc.py)."""

    @property
    def pid(self) -> int:
        """Where /proc reads it (a live thread when the main one exited)."""
        ...

    @property
    def tgid(self) -> int:
        """The process's id, as reports name it."""
        ...

    @property
    def command(self) -> str: ...

    @property
    def own_path(self) -> str:
        """The file whose mappings are the allocator's own memory: never roots."""
        ...

    @property
    def own_bss(self) -> tuple[int, int] | None:
        """The allocator's .bss past its file's pages (an anonymous mapping
        the path does not name): never roots. None: no shim."""
        ...

    @property
    def main_arena(self) -> tuple[int, int] | None:
        """glibc's main_arena when known (else the roots stage looks for it)."""
        ...

    @property
    def altstacks(self) -> tuple[int, int] | None:
        """The shim's sigaltstack table and its size (None: no shim)."""
        ...

    @property
    def descriptor_addr(self) -> int | None:
        """The shim's descriptor: its stack depot and its registry's count (None: no shim)."""
        ...

    @property
    def child_box(self) -> int:
        """The shim's in-child sweep mailbox (0: none)."""
        ...

    @property
    def live(self) -> bool:
        """A running process: checked for having exited, its files read
        through /proc (a core's are not)."""
        ...

    @property
    def typed(self) -> bool:
        """The leaks' C++ types are looked for in the mapped files."""
        ...

    def symbol_files(self, mappings: list[Mapping]) -> list[Mapping]:
        """The mappings with the paths of the files to symbolize from."""
        ...


@dataclass(slots=True, eq=False, repr=False)
class Captured:
    """A capture with what the later stages read of it."""

    held: Capture
    subject: Subject
    source: AllocationSource
