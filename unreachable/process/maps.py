"""Parse /proc/PID/maps into Mapping records."""

from __future__ import annotations

import os
from dataclasses import dataclass

from unreachable.errors import TargetNotFound, TargetPermissionDenied
from unreachable.process.access import why_denied

# The kernel's own mappings: no program data lies there, and some cannot be read.
SPECIAL = ("[vvar]", "[vdso]", "[vsyscall]", "[vvar_vclock]")


@dataclass(frozen=True, slots=True)
class Mapping:
    """One line of /proc/PID/maps."""

    start: int
    end: int
    perms: str
    offset: int
    inode: int
    path: str
    dev: int = 0  # the file's device (os.makedev), 0 where not known (dumps, cores)

    @property
    def readable(self) -> bool:
        return self.perms[0] == "r"

    @property
    def writable(self) -> bool:
        return self.perms[1] == "w"

    @property
    def executable(self) -> bool:
        return self.perms[2] == "x"

    @property
    def private(self) -> bool:
        return self.perms[3] == "p"

    @property
    def anonymous(self) -> bool:
        return self.inode == 0 and (not self.path or self.path.startswith("[anon"))

    @property
    def demand_zero(self) -> bool:
        """Private memory no file backs ([heap] and [stack] included): a page
        never touched is zero, and reading it would map the zero page in."""
        named = self.path in ("[heap]", "[stack]") or self.path.startswith(("[anon:", "[stack:"))
        return self.private and self.inode == 0 and (not self.path or named)

    def contains(self, addr: int) -> bool:
        return self.start <= addr < self.end


def parse_maps(text: str) -> list[Mapping]:
    mappings = []
    for line in text.splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) < 5:
            continue
        start, end = (int(x, 16) for x in parts[0].split("-"))
        path = parts[5].strip() if len(parts) == 6 else ""
        major, _, minor = parts[3].partition(":")
        dev = os.makedev(int(major, 16), int(minor or "0", 16))
        mappings.append(Mapping(start, end, parts[1], int(parts[2], 16), int(parts[4]), path, dev))
    return mappings


# The kernel writes a listing a piece at a time, letting the process's
# mappings change between pieces: read while a running target maps and
# unmaps, a listing may repeat a range or hold two overlapping ones (1.4% of
# reads of a thread replacing its pages). It is read again until it is in
# order, then the entries that overlap a later one are left out.
MAPS_READS = 20


def read_maps(pid: int) -> list[Mapping]:
    """The process's mappings, sorted by address, none overlapping."""
    for _ in range(MAPS_READS):
        mappings = parse_maps(read_maps_text(pid))
        if all(a.end <= b.start for a, b in zip(mappings, mappings[1:], strict=False)):
            return mappings
    return _in_order(mappings)


def _in_order(mappings: list[Mapping]) -> list[Mapping]:
    """The entries a later one does not overlap, the later one read after
    the change."""
    out: list[Mapping] = []
    for m in mappings:
        while out and out[-1].end > m.start:
            out.pop()
        out.append(m)
    return out


def read_maps_text(pid: int) -> str:
    """/proc/PID/maps unparsed: what a pause can afford (parse_maps after)."""
    try:
        with open(f"/proc/{pid}/maps", errors="surrogateescape") as f:
            return f.read()
    except FileNotFoundError:
        raise TargetNotFound(f"no process with pid {pid}") from None
    except PermissionError:
        raise TargetPermissionDenied(
            f"no permission to read the memory map of pid {pid}: {why_denied(pid)}"
        ) from None
    except ProcessLookupError:
        raise TargetNotFound(f"process {pid} exited") from None


def find_mapping(mappings: list[Mapping], addr: int) -> Mapping | None:
    lo, hi = 0, len(mappings)
    while lo < hi:
        mid = (lo + hi) // 2
        m = mappings[mid]
        if addr < m.start:
            hi = mid
        elif addr >= m.end:
            lo = mid + 1
        else:
            return m
    return None
