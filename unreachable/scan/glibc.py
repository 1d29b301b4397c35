"""The snapshot strategy of a process that runs without the shim (the
"whole copy" plan): its allocations are glibc's live chunks, walked from a
copy of its memory (docs/glibc-heap.md). Also the walk over a core of such
a process (scan/core.py).

capture: the stopper process (capture/stopper.py) stops every thread and
reads its registers; threads inside malloc.c's code are let run alone and
stopped again until none is (one that stays inside lets the process go and
the stop is tried again a moment later); it asks each thread its
sigaltstack; then, in the same stop, the pointers the kernel holds are
read, the writable memory is copied whole from here (native MemoryCopy)
and the stopper lets the process go. The pause is that one stop.
allocations: the walk over the copy (allocations/glibc_heap.py);
a walk that finds an arena locked, or fails a check, is tried again from a
new stop, a bounded number of times, and never becomes leaks. Both are
done here, as the walk needs what only the pause shows (libc's TLS
offsets); the strategy hands the walked heap over as its allocation
source. roots, mark, fold and report: every scan's (scan/run.py), over the
copy, with chunk usable sizes and no backtraces.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from functools import partial
from typing import Protocol, TypeVar

from unreachable import _native
from unreachable.allocations.glibc_heap import (
    KNOWN,
    LIBC,
    MINORS,
    UNDER_SHIM,
    GlibcLibc,
    HeapBusy,
    HeapWalkFailed,
    find_libc,
    not_glibc_malloc,
    program_counter,
    thread_pointer,
    thread_tcaches,
    tls_offsets,
    walk,
)
from unreachable.allocations.glibc_libc import LibcUnsupported, arena_layout, libc_facts
from unreachable.allocations.glibc_source import GlibcHeap
from unreachable.capture.copy_snapshot import sync_ranges
from unreachable.capture.core_file import CoreFile
from unreachable.capture.kernel_held import KernelHeld
from unreachable.capture.signal_stacks import SignalStacks
from unreachable.capture.stop_world import Capture, CapturedThread, stop_error
from unreachable.capture.stopper import Stopper, kill_here, stopper_path
from unreachable.capture.target import command_line
from unreachable.errors import (
    ScannerOutOfMemory,
    TargetNotShimmed,
    TargetUnscannable,
)
from unreachable.process.mapped_file import mapped_path
from unreachable.process.maps import Mapping, read_maps
from unreachable.process.memory import Memory
from unreachable.process.status import check_scannable
from unreachable.scan.captured import Captured
from unreachable.scan.facts import Facts
from unreachable.scan.plan import Plan, Retry
from unreachable.scan.syscall_site import syscall_instruction

RUN_OUT_ROUNDS = 64  # times threads inside malloc are run alone and stopped again
ATTEMPTS = 5  # stops tried before a heap that stays mid-update is given up
RETRY_DELAY_S = 0.02  # times the attempt: the moment a thread needs to leave malloc
ALLOCATIONS = "glibc heap"
_NOT_ASKED = SignalStacks(b"", -1, "no syscall instruction was found to ask them from")
NO_SHIM_PATH = "\0"  # a path no mapping has ("" would name every anonymous one)


@dataclass(slots=True)
class _Copied:
    pause_ns: int  # the stopper's stop (docs/pause.md), the process running again
    hold_ns: int
    threads: list[CapturedThread]
    copy: _native.MemoryCopy
    mappings: list[Mapping]
    held: KernelHeld
    tls: list[tuple[int, int]]

    @property
    def memory(self) -> Memory:
        return self.copy

    def close(self) -> None:
        self.copy.close()
        self.held.close()


class Snapshot(Protocol):
    """A stop's memory as the walk reads it: the whole copy (_Copied) or a
    frozen child (scan/glibc_fork.py)."""

    @property
    def threads(self) -> list[CapturedThread]: ...
    @property
    def memory(self) -> Memory: ...
    @property
    def mappings(self) -> list[Mapping]: ...
    @property
    def tls(self) -> list[tuple[int, int]]: ...
    def close(self) -> None: ...


S = TypeVar("S", bound=Snapshot)


def _copy_threads() -> int:
    return max(1, min(4, len(os.sched_getaffinity(0))))


def _stop_and_copy(pid: int, libc: GlibcLibc, ip: int = 0) -> _Copied | str:
    """The process's memory as it was with every thread stopped, or why this
    stop was no good (a thread inside malloc). One stop, the stopper's
    (capture/stopper.py): it stops every thread, runs those inside malloc
    out of it and asks each its sigaltstack in the same command (ip: a
    syscall instruction to ask from; 0: none found, not asked), then this
    process copies the
    memory and the stopper lets the process go. Injected by the stopper, a
    call in progress is finished and the thread's registers put back even
    when this process dies."""
    held = KernelHeld.before_stop(pid)
    try:
        stopper = Stopper(pid, ip)
    except OSError as e:
        held.close()
        raise TargetUnscannable(f"the stopper ({stopper_path()}) did not start: {e}") from None
    copy: _native.MemoryCopy | None = None
    done: _Copied | None = None
    try:
        try:
            got = stopper.stop(libc.malloc_code, RUN_OUT_ROUNDS, 0, bool(ip))
        except OSError as e:
            raise stop_error(pid, e) from None
        threads = [CapturedThread(*t) for t in got.threads]
        if got.left:
            return f"{got.left} thread(s) stayed inside malloc"  # let go by the close
        kill_here("stopped")
        try:
            held.read_in_pause()
        except OSError as e:
            raise stop_error(pid, e) from None
        held.signals = got.signal_values
        held.take_signal_stacks(got.signal_stacks if ip else _NOT_ASKED)
        copy, mappings, tls = _copy_in_stop(pid, libc)
        try:
            stopper.release()
        except OSError as e:
            raise stop_error(pid, e) from None
        done = _Copied(stopper.pause_ns, stopper.hold_ns, threads, copy, mappings, held, tls)
        return done
    finally:
        try:
            # Lets the process go if it still holds it. It made no child
            # to reap: a stopper that ended meanwhile let the process go
            # as it ended.
            with suppress(OSError):
                stopper.close()
        finally:
            if done is None:
                if copy is not None:
                    copy.close()
                held.close()


def _copy_in_stop(
    pid: int, libc: GlibcLibc
) -> tuple[_native.MemoryCopy, list[Mapping], list[tuple[int, int]]]:
    """The whole writable memory, the maps and libc's TLS offsets, read
    while the stopper holds every thread. The pin gate is opened for just
    this (a stop of another process's, which the gate cannot see) and
    shut, the reads past it done, before the release is asked."""
    copy: _native.MemoryCopy | None = None
    done = False
    _native.pin_open(pid)
    try:
        copy = _native.MemoryCopy(pid)
        mappings = read_maps(pid)
        tls = tls_offsets(pid, libc)
        copy.sync(sync_ranges(mappings), threads=_copy_threads())
        kill_here("copied")
        copy.finish()
        done = True
    except MemoryError:
        raise ScannerOutOfMemory(
            "the copy of the target's memory would take more than the scanner may (half of"
            " what is available, or of the room left in its own memory cgroup)"
        ) from None
    except OSError as e:
        raise stop_error(pid, e) from None
    finally:
        _native.pin_shut(pid)
        if copy is not None and not done:
            copy.close()
    return copy, mappings, tls


class SnapshotLacksHeap(Exception):
    """A walk refused over a snapshot that lacks some of the process's
    memory (a frozen child: what the process keeps out of forks), which may
    be glibc's own: only a snapshot that has it all can tell."""


def walked(
    pid: int,
    libc: GlibcLibc,
    take: Callable[[int, GlibcLibc], S | str],
    lacks: Callable[[S], str] | None = None,
) -> tuple[S, bytes, dict[str, int]]:
    """A snapshot taken by take (a copy, a frozen child) and its walked
    heap, stopping again while the heap is found mid-update or a check
    fails (a thread may have been inside malloc without a lock: a
    single-threaded process takes none). take returns why a stop was no
    good instead (a thread stayed inside malloc). lacks: what a snapshot
    lacks of the process ("": nothing); a failed check over one that lacks
    something raises SnapshotLacksHeap rather than stop again."""
    last, busy = "", False
    for attempt in range(ATTEMPTS):
        if attempt:
            time.sleep(RETRY_DELAY_S * attempt)
        got = take(pid, libc)
        if isinstance(got, str):
            last, busy = got, True
            continue
        try:
            tps = [thread_pointer(t.regs) for t in got.threads]
            tcaches = thread_tcaches(got.memory, libc, got.tls, tps)
            allocs, stats = walk(got.memory, libc, tcaches, got.mappings)
            return got, allocs, stats
        except HeapBusy as e:
            last, busy = str(e), True
        except HeapWalkFailed as e:
            last, busy = str(e), False
            if lacks is not None and (why := lacks(got)):
                got.close()
                raise SnapshotLacksHeap(
                    f"glibc's heap could not be walked in it ({last}): {why}"
                ) from None
        got.close()
    if busy:
        raise TargetUnscannable(
            f"{libc.describe()}'s heap was mid-update at each of {ATTEMPTS} stops ({last});"
            " scan again, or run it under the shim"
        )
    raise TargetUnscannable(f"glibc heap walk failed: {last}; no leaks are reported from it")


@dataclass(frozen=True, slots=True)
class NoShim:
    """A process without the shim, as the stages after capture see it
    (scan/captured.py Subject)."""

    pid: int
    tgid: int
    command: str
    main_arena: tuple[int, int] | None
    own_path: str = NO_SHIM_PATH
    own_bss: tuple[int, int] | None = None
    altstacks: tuple[int, int] | None = None
    descriptor_addr: int | None = None
    child_box: int = 0
    live: bool = True
    typed: bool = True

    def symbol_files(self, mappings: list[Mapping]) -> list[Mapping]:
        return mappings


@contextmanager
def whole_copy(facts: Facts, plan: Plan) -> Iterator[Captured | Retry]:
    """The whole copy's capture (scan/plan.py): the copy and the heap walked
    over it, then the stages every scan runs."""
    pid = facts.pid
    proc = check_scannable(pid).proc
    mappings = read_maps(proc)
    libc = find_libc(proc, mappings)
    ip = syscall_instruction(proc, libc, mappings)
    got, allocs, stats = walked(proc, libc, partial(_stop_and_copy, ip=ip))
    try:
        # Made in the pause and let go: the stages read the copy, as a
        # stopped scan's would read the target.
        held = Capture(
            None, got.threads, "stopped", copy=got.copy, mappings=got.mappings,
            kernel_held=got.held, stopper_pause_ns=got.pause_ns, stopper_hold_ns=got.hold_ns,
        )  # fmt: skip
        yield no_shim_captured(pid, proc, libc, held, allocs, stats)
    finally:
        got.close()


def no_shim_captured(
    pid: int, proc: int, libc: GlibcLibc, held: Capture, allocs: bytes, stats: dict[str, int]
) -> Captured:
    """What the stages after capture read of a walked heap."""
    if not stats["chunks"]:
        # A malloc of the program's own (linked into it) leaves glibc's
        # arenas untouched: "nothing leaked" would be a guess.
        raise TargetNotShimmed(
            f"pid {pid}: {libc.describe()}'s malloc holds nothing in this process: it"
            f" allocates with something else (a malloc linked into the program?); {UNDER_SHIM}"
        )
    subject = NoShim(proc, pid, command_line(proc), _arena_span(libc))
    return Captured(held, subject, GlibcHeap(allocs, guards_listed(libc)))


def guards_listed(libc: GlibcLibc) -> bool:
    """Whether a thread stack's guard is a mapping of its own. From 2.42
    pthread_create installs it with madvise(MADV_GUARD_INSTALL) where the
    kernel has it (6.13+): a guard inside the stack's mapping, which maps
    does not show."""
    return libc.facts.minor < 42


def _arena_span(libc: GlibcLibc) -> tuple[int, int]:
    """main_arena's bytes: a root, as the arena's bins are not the program's."""
    arena = libc.bias + libc.facts.main_arena
    return arena, arena + arena_layout(libc.facts.minor)[0]


def _core_libc(core: CoreFile) -> GlibcLibc:
    """glibc's libc in a core, as find_libc finds it in a process."""
    if why := not_glibc_malloc(core.mappings):
        raise TargetNotShimmed(
            f"{core.path} is of a process that ran without the unreachable shim, and its heap"
            f" cannot be walked: {why}; {UNDER_SHIM}"
        )
    first = next(
        m for m in core.mappings if m.offset == 0 and LIBC.match(os.path.basename(mapped_path(m)))
    )
    if first.path in core.changed:
        raise TargetNotShimmed(
            f"{core.path}: {core.file_for(first.path)} is not the libc the process ran:"
            " give the machine's files with --sysroot"
        )
    try:
        facts = libc_facts(core.file_for(first.path), core.root)
    except (OSError, LibcUnsupported) as e:
        raise TargetNotShimmed(
            f"{core.path}: glibc's heap cannot be walked ({core.file_for(first.path)}: {e});"
            " give the machine's files with --sysroot"
        ) from None
    if facts.minor not in MINORS:
        raise TargetNotShimmed(
            f"{core.path} is of a process with glibc {facts.version}, whose heap layout is not"
            f" known here ({KNOWN} are)"
        )
    return GlibcLibc(first, first.start, facts)


def walk_core(core: CoreFile) -> tuple[GlibcHeap, tuple[int, int]]:
    """A core of a process without the shim: glibc's heap walked over it,
    and where its main_arena lies. It cannot be stopped again: a heap
    mid-update (a thread was inside malloc when it was dumped) or a failed
    check ends the scan."""
    libc = _core_libc(core)
    memory = core.memory
    core.lacks(libc.bias + libc.facts.main_arena, "glibc's main_arena")
    lo, hi = libc.malloc_code
    inside = [t.tid for t in core.threads if hi and lo <= program_counter(t.regs) < hi]
    try:
        if inside:
            raise HeapBusy(f"thread {inside[0]} was inside malloc when the core was dumped")
        tps = [thread_pointer(t.regs) for t in core.threads]
        tcaches = thread_tcaches(memory, libc, tls_offsets(memory, libc), tps)
        allocs, stats = walk(memory, libc, tcaches, core.mappings)
    except HeapBusy as e:
        raise TargetUnscannable(
            f"{libc.describe()}'s heap in {core.path} is mid-update ({e}): no leaks are"
            " reported from it"
        ) from None
    except HeapWalkFailed as e:
        raise TargetUnscannable(
            f"glibc heap walk failed: {e}; no leaks are reported from it"
        ) from None
    if not stats["chunks"]:
        raise TargetNotShimmed(
            f"{core.path}: {libc.describe()}'s malloc holds nothing in this process: it"
            f" allocates with something else (a malloc linked into the program?); {UNDER_SHIM}"
        )
    return GlibcHeap(allocs, core.guards_listed and guards_listed(libc)), _arena_span(libc)
