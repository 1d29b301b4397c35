"""A scan of a process that runs without the shim: its allocations are
glibc's live chunks, walked from a copy of its memory (docs/glibc-heap.md).

capture: every thread stopped, registers read; threads inside malloc.c's
code are let run alone and stopped again until none is (one that stays
inside lets the process go and the stop is tried again a moment later);
then the pointers the kernel holds are read, the writable memory is copied
whole (native MemoryCopy) and the process is let go. The pause is that
copy. allocations: the walk over the copy (allocations/glibc_heap.py);
a walk that finds an arena locked, or fails a check, is tried again from a
new stop, a bounded number of times, and never becomes leaks. roots, mark,
fold and report: as for any scan, over the copy, with chunk usable sizes and
no backtraces.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

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
from unreachable.capture.stop_world import CapturedThread, stop_error
from unreachable.capture.target import command_line, still_running
from unreachable.errors import (
    ScannerOutOfMemory,
    TargetNotFound,
    TargetNotShimmed,
    TargetUnscannable,
)
from unreachable.process.mapped_file import mapped_path
from unreachable.process.maps import Mapping, read_maps
from unreachable.process.status import check_scannable
from unreachable.report.model import ScanReport
from unreachable.scan.allocations import find_allocations
from unreachable.scan.fold import Folded, fold
from unreachable.scan.mark import MarkOver, mark
from unreachable.scan.options import Progress, ScanOptions
from unreachable.scan.report import Scanned, build_report
from unreachable.scan.roots import RootInputs, RootSet, find_roots
from unreachable.scan.symbolize import Symbolized
from unreachable.sweep.mark import SweepResult

RUN_OUT_ROUNDS = 64  # times threads inside malloc are run alone and stopped again
ATTEMPTS = 5  # stops tried before a heap that stays mid-update is given up
RETRY_DELAY_S = 0.02  # times the attempt: the moment a thread needs to leave malloc
ALLOCATIONS = "glibc heap"
NO_SHIM_PATH = "\0"  # a path no mapping has ("" would name every anonymous one)


@dataclass(slots=True)
class _Copied:
    threads: list[CapturedThread]
    copy: _native.MemoryCopy
    mappings: list[Mapping]
    held: KernelHeld
    tls: list[tuple[int, int]]
    pause_ms: float

    def close(self) -> None:
        self.copy.close()
        self.held.close()


def _copy_threads() -> int:
    return max(1, min(4, len(os.sched_getaffinity(0))))


def _stop_and_copy(pid: int, libc: GlibcLibc) -> _Copied | str:
    """The process's memory as it was with every thread stopped, or why this
    stop was no good (a thread inside malloc)."""
    held = KernelHeld.before_stop(pid)
    session = _native.Session(pid)
    copy: _native.MemoryCopy | None = None
    done: _Copied | None = None
    try:
        try:
            threads = [CapturedThread(*t) for t in session.stop()]
        except OSError as e:
            raise stop_error(pid, e) from None
        lo, hi = libc.malloc_code
        if hi:
            # Let just those threads run out of malloc.
            try:
                left, raw = session.run_out(lo, hi, RUN_OUT_ROUNDS)
            except OSError as e:
                raise stop_error(pid, e) from None
            threads = [CapturedThread(*t) for t in raw]
            if left:
                inside = [t.tid for t in threads if lo <= program_counter(t.regs) < hi]
                return f"thread {inside[0] if inside else '?'} stayed inside malloc"
        try:
            held.read_in_pause()
            held.signals = session.pending_signal_values()
            mappings = read_maps(pid)
            tls = tls_offsets(pid, libc)
            copy = _native.MemoryCopy(pid)
            copy.sync(sync_ranges(mappings), threads=_copy_threads())
            copy.finish()
        except MemoryError:
            raise ScannerOutOfMemory(
                "the copy of the target's memory would take more than the scanner may (half of"
                " what is available, or of the room left in its own memory cgroup)"
            ) from None
        except OSError as e:
            raise stop_error(pid, e) from None
        session.release()
        done = _Copied(threads, copy, mappings, held, tls, session.pause_ns / 1e6)
        return done
    finally:
        session.close()
        if done is None:
            if copy is not None:
                copy.close()
            held.close()


def _allocations(pid: int, libc: GlibcLibc) -> tuple[_Copied, bytes, dict[str, int]]:
    """A copy and its walked heap, stopping again while the heap is found
    mid-update or a check fails (a thread may have been inside malloc
    without a lock: a single-threaded process takes none)."""
    last, busy = "", False
    for attempt in range(ATTEMPTS):
        if attempt:
            time.sleep(RETRY_DELAY_S * attempt)
        got = _stop_and_copy(pid, libc)
        if isinstance(got, str):
            last, busy = got, True
            continue
        try:
            tps = [thread_pointer(t.regs) for t in got.threads]
            tcaches = thread_tcaches(got.copy, libc, got.tls, tps)
            allocs, stats = walk(got.copy, libc, tcaches, got.mappings)
            return got, allocs, stats
        except HeapBusy as e:
            last, busy = str(e), True
        except HeapWalkFailed as e:
            last, busy = str(e), False
        got.close()
    if busy:
        raise TargetUnscannable(
            f"{libc.describe()}'s heap was mid-update at each of {ATTEMPTS} stops ({last});"
            " scan again, or run it under the shim"
        )
    raise TargetUnscannable(f"glibc heap walk failed: {last}; no leaks are reported from it")


def scan_without_shim(pid: int, options: ScanOptions, note: Progress, started: float) -> ScanReport:
    """The whole copy's plan (scan/plan.py): capture and the heap's walk
    here, then the stages every scan runs."""
    status = check_scannable(pid)
    proc = status.proc
    libc = find_libc(proc, read_maps(proc))
    got, allocs, stats = _allocations(proc, libc)
    if not stats["chunks"]:
        got.close()
        # A malloc of the program's own (linked into it) leaves glibc's
        # arenas untouched: "nothing leaked" would be a guess.
        raise TargetNotShimmed(
            f"pid {pid}: {libc.describe()}'s malloc holds nothing in this process: it allocates"
            f" with something else (a malloc linked into the program?); {UNDER_SHIM}"
        )
    try:
        note("captured")
        over = MarkOver(got.copy, got.mappings, got.threads, kernel_held=got.held)
        source = GlibcHeap(allocs, guards_listed(libc))
        result, roots, folded = sweep_walked(over, libc, source, options, note, proc)
    finally:
        got.close()
    if not still_running(proc):
        raise TargetNotFound(f"process {pid} exited during the scan")
    note("done")
    scanned = Scanned(pid, command_line(proc), "stopped", len(got.threads), got.pause_ms, started)
    return build_report(scanned, result, folded, Symbolized({}, ""), roots.counts(), ALLOCATIONS)


def guards_listed(libc: GlibcLibc) -> bool:
    """Whether a thread stack's guard is a mapping of its own. From 2.42
    pthread_create installs it with madvise(MADV_GUARD_INSTALL) where the
    kernel has it (6.13+): a guard inside the stack's mapping, which maps
    does not show."""
    return libc.facts.minor < 42


def sweep_walked(
    over: MarkOver,
    libc: GlibcLibc,
    source: GlibcHeap,
    options: ScanOptions,
    note: Progress,
    pid: int = 0,
) -> tuple[SweepResult, RootSet, Folded]:
    """allocations, roots, mark and fold over a copy (or a core) whose heap
    was walked. pid: the live process whose files name the leaks' types (0:
    the files the mappings name)."""
    memory, mappings = over.memory, over.mappings
    allocations = find_allocations(source, memory, mappings, over.threads)
    note("allocations")
    arena = libc.bias + libc.facts.main_arena
    size = arena_layout(libc.facts.minor)[0]
    inputs = RootInputs(NO_SHIM_PATH, [(arena, arena + size)], over.kernel_held)
    roots = find_roots(memory, mappings, over.threads, allocations, inputs)
    result = mark(over, allocations, roots, mark_threads=options.mark_threads)
    note("marked")
    folded = fold(result, options, memory, mappings, pid)
    note("folded")
    return result, roots, folded


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


def sweep_glibc_core(
    core: CoreFile, options: ScanOptions, note: Progress, started: float
) -> ScanReport:
    """A core of a process without the shim: glibc's heap walked over it.
    It cannot be stopped again: a heap mid-update (a thread was inside
    malloc when it was dumped) or a failed check ends the scan."""
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
    over = MarkOver(memory, core.mappings, core.threads)
    source = GlibcHeap(allocs, core.guards_listed and guards_listed(libc))
    result, roots, folded = sweep_walked(over, libc, source, options, note)
    note("done")
    notes = "; ".join(core.notes)
    scanned = Scanned(core.pid, core.command, "core", len(core.threads), 0.0, started, notes)
    return build_report(scanned, result, folded, Symbolized({}, ""), roots.counts(), ALLOCATIONS)
