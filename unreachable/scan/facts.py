"""What is known about a target before any of its threads stops, read once.

The plan (plan.py) is chosen from these facts alone; nothing here decides.
What can only be known in or after the pause is found by the stage that
meets it: a helper whose clone() a seccomp filter may stop leaves the
target stopped, swept in place; a fork that lacks more than the scanner may
hold, or a snapshot child that died, asks for the next plan (plan.Retry).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from unreachable import _native
from unreachable.capture.copy_snapshot import COPY_FROM_BYTES, copy_pays_off, cow_possible
from unreachable.capture.kept_out_of_fork import ForkFlags, fork_flags, shim_regions
from unreachable.capture.target import Target, open_target, runs_without_shim
from unreachable.errors import ScannerOutOfMemory, TargetNotShimmed
from unreachable.process.cgroup_memory import (
    memory_headroom,
    no_room_for_fork,
    no_room_for_outside_sweep,
    scanner_cache_budget,
)
from unreachable.process.maps import read_maps
from unreachable.process.memory import Memory
from unreachable.process.status import check_scannable, resident_anonymous_bytes
from unreachable.scan.options import ScanOptions
from unreachable.sweep.child import BusyLooks

if TYPE_CHECKING:
    from unreachable.capture.core_file import CoreFile


def expected_allocations(memory: Memory, addr: int) -> int | None:
    """The registry's count of live allocations: its shards' counts and its
    size maps' entries (a read of every map)."""
    try:
        return int(_native.read_registry(memory, addr, False)["expected"])
    except (OSError, ValueError):
        return None  # reading the registry again says what is wrong


@dataclass(slots=True, eq=False, repr=False)
class ScannerRoom:
    """This process's memory cgroup room when the scan began (None: no
    limit) and the part of it its copies of target memory may take."""

    at_start: int | None
    cache_budget: int

    @classmethod
    def now(cls) -> ScannerRoom:
        room = memory_headroom(os.getpid())
        own = cls(room, scanner_cache_budget(room))
        _native.set_cache_budget(own.cache_budget)
        return own

    def check_outside_sweep(self, memory: Memory, addr: int, copied: bool, fallback: str) -> None:
        """Refuse, before it allocates, a sweep from outside that would push
        this process over its limit: the kernel would OOM-kill it mid-sweep
        (and under systemd's default OOMPolicy= stop the daemon it runs in).
        A copy already made is charged; otherwise its budget is kept free."""
        if self.at_start is not None:
            self.check_sweep_of(expected_allocations(memory, addr), copied, fallback)

    def check_sweep_of(self, expected: int | None, copied: bool, fallback: str = "") -> None:
        """check_outside_sweep for a count known otherwise: a process
        without the shim, once its glibc heap is walked (before the mark,
        which takes most of it)."""
        if self.at_start is None or expected is None:
            return
        room = memory_headroom(os.getpid())
        if room is None:
            return
        free = room - (0 if copied else self.cache_budget)
        if why := no_room_for_outside_sweep(free, expected):
            also = f" (the snapshot child did not sweep itself: {fallback})" if fallback else ""
            raise ScannerOutOfMemory(f"{why}; give the scanner more memory{also}")


@dataclass(slots=True, eq=False, repr=False)
class Facts:
    """What is known of the target before a snapshot is chosen."""

    pid: int
    # The shim's registry was found (open_target); target is None otherwise.
    shim: bool = True
    target: Target | None = None
    no_shim: str = ""  # why the shim's registry cannot be read (no shim, or an inert one)
    glibc_heap: bool = False  # no shim mapped at all: glibc's heap can be walked from outside
    child_box: bool = True  # the shim can sweep inside its snapshot child
    anonymous_bytes: int = 0  # resident anonymous memory (what a copy holds)
    allocations: int | None = None  # the registry's live count (None: not read, or unreadable)
    # What a fork would lack (smaps, read while the target runs): empty when
    # not looked at (no fork possible, or a copy chosen without it).
    kept_out: ForkFlags = field(default_factory=ForkFlags)
    fork_room: str = ""  # why the target's memory cgroup has no room for a snapshot child
    headroom: int | None = None  # what the target's memory cgroup could still be charged
    # This scanner's own memory cgroup room (bounds its copies and its sweep).
    scanner_room: ScannerRoom = field(default_factory=lambda: ScannerRoom(None, 0))
    core: CoreFile | None = None  # a core file scanned instead of a process
    # A copy snapshot would be copy-on-write, not the classic copy that
    # holds the heap (read for auto only).
    cow: bool = False
    # The target's threads that wanted a CPU before the scan touched it
    # (None: not counted; a mark beside the target leaves them their cores).
    busy_threads: int | None = None


def _other_allocator(pid: int) -> str:
    """The line refusing a process without the shim whose malloc is not
    glibc's, or "" (read from a live thread: the leader may have exited)."""
    from unreachable.allocations.glibc_heap import refuse_not_glibc  # scans without the shim

    try:
        refuse_not_glibc(pid, read_maps(check_scannable(pid).proc))
    except TargetNotShimmed as other:
        return str(other)
    return ""


def gather_facts(pid: int, options: ScanOptions) -> Facts:
    """The facts the plan may need for these options, each read once."""
    try:
        target = open_target(pid)
    except TargetNotShimmed as e:
        # First, as under the shim: the copy made in the pause and what the
        # injected fork's pause reads are bounded by this cgroup's room.
        scanner_room = ScannerRoom.now()
        glibc = runs_without_shim(pid)
        # Another allocator is named first, whatever else was asked.
        why = (_other_allocator(pid) if glibc else "") or str(e)
        glibc = glibc and why == str(e)
        anonymous = resident_anonymous_bytes(pid) if glibc else 0
        # What the injected fork's child would lack, read where auto may take one.
        may_fork = glibc and options.snapshot == "auto" and options.sweep != "child"
        return Facts(
            pid,
            shim=False,
            no_shim=why,
            glibc_heap=glibc,
            anonymous_bytes=anonymous,
            kept_out=fork_flags(pid) if may_fork else ForkFlags(),
            scanner_room=scanner_room,
        )
    pid = target.pid
    # Counted before any snapshot: a copy-on-write copy's protection holds a
    # writing thread in a fault for a moment, not busy as it looks then. The
    # first look now, the others after the facts below (count() sleeps only
    # for what is left of the gap between looks). With a named team too: a
    # copy's or a concurrent mark's end runs beside the scan only where a
    # core is spare (write_tracking.py end_in_background).
    busy = BusyLooks(pid) if options.snapshot != "stopped" else None
    # First: what a fork may read of the memory it lacks is bounded by it.
    scanner_room = ScannerRoom.now()
    headroom = memory_headroom(pid)
    anonymous = resident_anonymous_bytes(pid)
    # The registry's count decides only between a copy and a fork, and
    # matters only for a heap a copy may pay off for.
    auto = options.snapshot == "auto" and options.sweep != "child"
    cow = auto and cow_possible(pid)
    allocations = (
        expected_allocations(target.pid, target.shim.descriptor_addr)
        if auto and not cow and anonymous >= COPY_FROM_BYTES
        else None
    )
    if busy:
        busy.look_if_due()
    kept_out = ForkFlags()
    # smaps walks every page table: not read when a copy is taken anyway
    # (unless a fork's pause is to be weighed against a budget).
    if options.snapshot in ("auto", "fork"):
        budget = options.max_pause_ms is not None
        if budget or not (auto and copy_pays_off(anonymous, allocations, cow=cow)):
            kept_out = fork_flags(pid, shim_regions(pid, target.shim.descriptor_addr))
    if auto and allocations is None and kept_out.prefers_copy:
        allocations = expected_allocations(target.pid, target.shim.descriptor_addr)
    return Facts(
        pid,
        target=target,
        child_box=bool(target.header.child_box),
        anonymous_bytes=anonymous,
        allocations=allocations,
        kept_out=kept_out,
        fork_room=no_room_for_fork(headroom, anonymous),
        headroom=headroom,
        scanner_room=scanner_room,
        cow=cow,
        busy_threads=busy.count((target.header.helper_tid,)) if busy else None,
    )
