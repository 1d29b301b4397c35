"""Memory a fork snapshot does not have.

A mapping marked MADV_DONTFORK is left out of every child, the snapshot
child included: node's V8 heap, io_uring's rings (MariaDB's among them),
RDMA and DPDK buffers. The pointers it holds would be missing from the
roots and the blocks they keep alive reported leaked: node under the shim
had over 400 such "leaks" in a fork snapshot, none when stopped.

A mapping marked MADV_WIPEONFORK is in the child, but zeroed (LibreSSL's
and BoringSSL's random number state live in such pages). Its line in maps
is the same in both; only smaps's VmFlags ("wf") tell, and smaps walks
every page table (~25 ms for a 1 GB heap), so it is read before the stop,
not in the pause. A mapping marked in between is missed.

So while the target is still stopped for the snapshot, its maps are
compared with the frozen child's, and what the child lacks or has wiped is
read from the target then and there: its words become roots as register
values are. That costs the pause what reading them costs, so past
KEPT_OUT_PREFER_COPY_BYTES "auto" takes a copy snapshot instead where it
can; where it cannot, the fork still reads it all, since the other way,
stopped, reads the same memory and the rest of the heap in its pause. Only
past what the scanner may hold (read_limit: the bound on its copies of
target memory) is it not read, and a scan takes no snapshot child. The room
they are read into is sized from smaps and its pages touched before the
stop, and the read is native (native/scanner/span_read.c: process_vm_readv
by a few threads): node with 16 MiB of V8 pages paused 24-25 ms when they
were read through /proc/PID/mem into new memory (a page fault per page,
then a join copying it all again), 8.5-12 ms with the room made ready, and
4.8-6.7 ms (14.7 MiB) with the native read.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field

from unreachable import _native
from unreachable.process.maps import Mapping, parse_maps
from unreachable.process.memory import present_ranges

# Past this much (~5-7 ms of reading here), "auto" prefers a copy snapshot.
KEPT_OUT_PREFER_COPY_BYTES = 16 << 20

# abi.h UR_MAX_REGIONS.
_MAX_REGIONS = 4096

# The kernel gives every process its own of these.
_PER_PROCESS = ("[vvar]", "[vdso]", "[vsyscall]", "[vvar_vclock]")


@dataclass(slots=True, eq=False, repr=False)
class KeptOut:
    """The target's memory a fork snapshot's child lacks, read in the pause."""

    mappings: list[Mapping] = field(default_factory=list)  # the target's, missing in the child
    words: bytes | bytearray = b""  # their contents at the snapshot, present pages only
    code: bytes = b""  # the part of words that is JIT code (roots/jit_code.py)
    too_big: str = ""  # why they were not read ("" when read, or when there are none)


def kept_out_of_fork(target: list[Mapping], child: list[Mapping]) -> list[Mapping]:
    """The target's readable mappings that the child does not have."""
    have = {(m.start, m.end) for m in child}
    return [
        m
        for m in target
        if m.readable and m.path not in _PER_PROCESS and (m.start, m.end) not in have
    ]


# The scan holds this many copies of the words at most: the room smaps sized,
# and a bigger buffer when the memory grew since (only the words that point
# into the heap go on to the sweep: roots/heap_words.py).
_COPIES_HELD = 2


def read_limit() -> int:
    """The most a fork's pause reads of such memory: what the scanner's
    copies of target memory may take (half of what is available, or of the
    room its own memory cgroup leaves, scan/facts.py ScannerRoom), shared by the copies the
    scan holds of it."""
    return _native.cache_bound() // _COPIES_HELD


@dataclass(slots=True)
class ForkFlags:
    """What smaps says, before the stop, of the memory a fork leaves out."""

    wiped: list[tuple[int, int]] = field(default_factory=list)  # MADV_WIPEONFORK mappings
    resident: int = 0  # bytes resident in them and in the MADV_DONTFORK ones
    # Room for reading those in the pause, its pages touched (make_room).
    room: bytearray | None = None
    # read_limit() as the flags were read, before the stop: the pause reads
    # no /proc/meminfo (~20 us).
    limit: int = field(default_factory=read_limit, compare=False)

    @property
    def prefers_copy(self) -> bool:
        """Whether reading them would cost a fork's pause more than a copy
        snapshot's whole pause."""
        return self.resident > KEPT_OUT_PREFER_COPY_BYTES

    @property
    def too_big(self) -> bool:
        """Whether there is more of them than the scanner may hold."""
        return self.resident > self.limit

    def make_room(self) -> None:
        """Room for the read, made while the target runs, once a fork is
        chosen (none past the limit: nothing will be read)."""
        if self.resident and not self.too_big:
            self.room = bytearray(self.resident)  # zeroed: every page touched


def shim_regions(pid: int, descriptor_addr: int) -> list[tuple[int, int]]:
    """The shim's own memory (abi.h ur_region_span), [] if unreadable."""
    try:
        fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return []
    try:
        size = _native.abi_sizeof("ur_descriptor")
        raw = _native.abi_decode("ur_descriptor", os.pread(fd, size, descriptor_addr))
        n = min(int(raw["num_regions"]), _MAX_REGIONS)
        data = os.pread(fd, 16 * n, int(raw["regions"])) if n else b""
    except (OSError, ValueError):
        return []
    finally:
        os.close(fd)
    return [struct.unpack_from("<QQ", data, at) for at in range(0, len(data) - 15, 16)]


def fork_flags(pid: int, own: list[tuple[int, int]] | None = None) -> ForkFlags:
    """The target's mappings a fork leaves out or wipes, from smaps (read
    while it runs). Unreadable smaps: none known. Those inside own (the
    shim's regions: its fork words are wiped in every child, docs/shim.md)
    are left out: the shim's memory is never a root."""
    try:
        with open(f"/proc/{pid}/smaps", errors="surrogateescape") as f:
            text = f.read()
    except OSError:
        return ForkFlags()
    if " wf" not in text and " dc" not in text:  # without the shim, the usual case
        return ForkFlags()
    own = own or []
    flags, current, rss = ForkFlags(), (0, 0), 0
    for line in text.splitlines():
        first, _, rest = line.partition(" ")
        if first == "VmFlags:":
            names = rest.split()
            if any(b <= current[0] and current[1] <= e for b, e in own):
                continue
            if "wf" in names:
                flags.wiped.append(current)
            if "wf" in names or "dc" in names:
                flags.resident += rss
        elif first == "Rss:":
            rss = int(rest.split()[0]) << 10
        elif not first.endswith(":") and "-" in first:
            start, _, end = first.partition("-")
            current, rss = (int(start, 16), int(end, 16)), 0
    return flags


def _read_spans(pid: int, spans: list[tuple[int, int]], room: bytearray | None) -> bytearray:
    """The spans' bytes end to end, read into room when it is big enough
    (native: process_vm_readv by a few threads); unreadable pages read as
    zero, which is no root."""
    size = sum(e - b for b, e in spans)
    out = room if room is not None and len(room) >= size else bytearray(size)
    # The native side caps the threads (and uses fewer for small reads).
    threads = len(os.sched_getaffinity(0))
    _native.read_spans(pid, b"".join(struct.pack("<QQ", b, e) for b, e in spans), out, threads)
    del out[size:]
    return out


def read_kept_out(
    pid: int, target_maps: str, child_maps: str, flags: ForkFlags | None = None
) -> KeptOut:
    """What the child lacks or has wiped (flags, from fork_flags), read from
    the stopped target (maps unparsed, as read in the pause: only the lines
    that differ are parsed, and all of them only when something is wiped)
    into the room made for them."""
    flags = flags or ForkFlags()
    wiped = flags.wiped
    child_lines = set(child_maps.splitlines())
    differ = "\n".join(line for line in target_maps.splitlines() if line not in child_lines)
    missing = kept_out_of_fork(parse_maps(differ), parse_maps(child_maps)) if differ else []
    if wiped:
        # Still the target's (it may have unmapped them since smaps) and readable.
        known = set(wiped)
        missing += [m for m in parse_maps(target_maps) if m.readable and (m.start, m.end) in known]
    if not missing:
        return KeptOut()
    spans = present_ranges(pid, sorted((m.start, m.end) for m in missing))
    size = sum(e - b for b, e in spans)
    if size > flags.limit:
        return KeptOut(
            missing,
            too_big=f"{describe(missing)} ({size >> 20} MiB in use, more than the"
            f" {flags.limit >> 20} MiB this scanner may hold)",
        )
    code = [(m.start, m.end) for m in missing if m.anonymous and m.executable]
    words = _read_spans(pid, spans, flags.room)
    jit, at = [], 0
    for b, e in spans:
        if any(cb <= b < ce for cb, ce in code):
            jit.append(words[at : at + e - b])
        at += e - b
    return KeptOut(missing, words, b"".join(jit))


def describe(missing: list[Mapping]) -> str:
    """One line for the report's snapshot_note."""
    size = sum(m.end - m.start for m in missing)
    first = missing[0]
    return (
        f"the target keeps {len(missing)} mapping(s), {size >> 20} MiB, out of forks"
        f" (MADV_DONTFORK or MADV_WIPEONFORK, first {first.start:#x}-{first.end:#x}"
        f" {first.path or 'anonymous'})"
    )
