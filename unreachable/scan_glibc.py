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
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from unreachable import _native
from unreachable.allocations.descriptor import SHIM_PREFIX
from unreachable.allocations.glibc_heap import (
    LIBC,
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
from unreachable.allocations.glibc_libc import LibcUnsupported, libc_facts
from unreachable.allocations.registry import THREAD_EXITED, Registry, ThreadSlot
from unreachable.capture.copy_snapshot import sync_ranges
from unreachable.capture.core_file import CoreFile
from unreachable.capture.kernel_held import KernelHeld
from unreachable.capture.stop_world import CapturedThread, stop_error
from unreachable.capture.target import command_line, still_running
from unreachable.errors import (
    ScanError,
    ScannerOutOfMemory,
    TargetNotFound,
    TargetNotShimmed,
    TargetUnscannable,
)
from unreachable.fold.types import fold_leaks
from unreachable.process.mapped_file import mapped_path
from unreachable.process.maps import Mapping, read_maps
from unreachable.process.memory import present_ranges
from unreachable.process.secure_exec import runs_secure
from unreachable.process.status import check_scannable
from unreachable.report.model import LeakEntry, ScanReport, leak_counts
from unreachable.roots.classify import Roots, classify, register_words
from unreachable.roots.exited_threads import SEARCH_TOP, dtv_words
from unreachable.roots.glibc_heaps import heap_parts, registry_blocks_in
from unreachable.roots.heap_words import anonymous_spans, heap_spans
from unreachable.roots.jit_code import code_words
from unreachable.sweep.child import default_mark_threads
from unreachable.sweep.mark import SweepResult, sweep

RUN_OUT_ROUNDS = 64  # times threads inside malloc are run alone and stopped again
ATTEMPTS = 5  # stops tried before a heap that stays mid-update is given up
RETRY_DELAY_S = 0.02  # times the attempt: the moment a thread needs to leave malloc
ARENA_SIZE = 0x898
CONTENTS_BYTES = 32
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


def _cached_stacks(
    memory: _native.MemoryCopy,
    mappings: list[Mapping],
    threads: list[CapturedThread],
    guards: bool = True,
) -> list[ThreadSlot]:
    """Stacks glibc keeps for reuse after their threads exited (the shim
    records them; here they are recognised): an anonymous mapping right
    above a guard, with no live thread's SP in it and a thread control
    block at its top (tcbhead_t's tcb and self pointing at it) that is no
    live thread's thread pointer. Not roots: a dead thread's frames and TLS
    would keep its leaks alive. guards: False where the mappings do not list
    PROT_NONE ones (gdb's cores): the control block decides alone."""
    sps = [t.sp for t in threads]
    tps = {thread_pointer(t.regs) for t in threads}
    out = []
    for below, m in zip(mappings, mappings[1:], strict=False):
        if not (m.anonymous and m.readable and m.writable and m.private):
            continue
        if guards and (below.end != m.start or below.perms[:3] != "---"):
            continue
        if any(m.start <= sp < m.end for sp in sps):
            continue
        begin = max(m.start, m.end - SEARCH_TOP)
        try:
            raw = memory.read(begin, m.end - begin)
        except OSError:
            continue
        words = struct.unpack(f"<{len(raw) // 8}Q", raw[: len(raw) // 8 * 8])
        for i in range(len(words) - 2):
            addr = begin + 8 * i
            if words[i] == addr and words[i + 2] == addr:
                if addr not in tps:
                    out.append(ThreadSlot(0, THREAD_EXITED, 0, 0, 0, 0, 0, m.start, m.end))
                break
    return out


def _contents(copy: _native.MemoryCopy, addr: int, size: int) -> bytes:
    try:
        return copy.read(addr, min(size, CONTENTS_BYTES))
    except OSError:
        return b""


def runs_without_shim(pid: int) -> bool:
    """No shim mapped at all, and not for want of LD_PRELOAD in a
    secure-execution process (its line says why: the user meant a shim)."""
    try:
        mappings = read_maps(check_scannable(pid).proc)
    except ScanError:
        return False  # the refusal already raised says what is wrong
    names = (os.path.basename(mapped_path(m)) for m in mappings if m.path.startswith("/"))
    return not any(n.startswith(SHIM_PREFIX) for n in names) and not runs_secure(pid)


def scan_without_shim(
    pid: int,
    limit: int,
    contents: bool,
    mark_threads: int,
    note: Callable[[str], None],
    started: float,
    sample: int = 0,
) -> ScanReport:
    """sample: the contents of the first `sample` entries are read even
    without contents (no entry here has a backtrace)."""
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
        held = got.held
        anonymous = anonymous_spans(got.mappings)
        kernel = [
            ("epoll data", held.epoll_words()),
            ("timer values", held.timer_words()),
            ("signal values", held.signal_words()),
            ("pipe data", held.in_flight.pipe_words(anonymous)),
            ("socket data", held.in_flight.socket_words(anonymous)),
        ]
        result, roots, entries = _sweep_copy(
            got.copy,
            got.mappings,
            got.threads,
            kernel,
            libc,
            allocs,
            limit,
            contents,
            mark_threads,
            note,
            pid=proc,
            sample=sample,
        )
    finally:
        got.close()
    if not still_running(proc):
        raise TargetNotFound(f"process {pid} exited during the scan")
    note("done")
    return _report(
        pid,
        command_line(proc),
        result,
        roots,
        entries,
        got.pause_ms,
        started,
        "stopped",
        len(got.threads),
    )


def _sweep_copy(
    memory: _native.MemoryCopy,
    mappings: list[Mapping],
    threads: list[CapturedThread],
    kernel: list[tuple[str, bytes]],
    libc: GlibcLibc,
    allocs: bytes,
    limit: int,
    contents: bool,
    mark_threads: int,
    note: Callable[[str], None],
    guards: bool = True,
    pid: int = 0,
    sample: int = 0,
) -> tuple[SweepResult, Roots, list[LeakEntry]]:
    """roots, mark and fold over a copy (or a core) whose heap was walked;
    kernel: the value roots the kernel held, by kind. pid: the live process
    whose files name the leaks' types (0: the files the mappings name);
    sample: the contents of the first `sample` entries are read even without
    contents."""
    n = len(allocs) // 16
    registry = Registry(
        allocs=memoryview(allocs).cast("Q"),
        stack_ids=memoryview(bytes(4 * n)).cast("I"),
        threads=_cached_stacks(memory, mappings, threads, guards),
        locked_shards=[],
        helper_tid=0,
        helper_cmd=0,
        regions=[],
        options="",
        max_frames=0,
    )
    note("allocations")
    heap = heap_parts(memory, mappings, registry_blocks_in(registry))
    arena = libc.bias + libc.facts.main_arena
    roots = classify(
        mappings,
        {t.tid: t.sp for t in threads},
        registry,
        NO_SHIM_PATH,
        [(arena, arena + ARENA_SIZE)],
        heap,
        partial(present_ranges, memory),
    )
    jit = code_words(memory, mappings, heap_spans(mappings, heap))
    roots.kinds.update({kind: len(words) for kind, words in kernel if words})
    if jit:
        roots.kinds["code immediates"] = len(jit)
    regs = [t.regs for t in threads] + [t.xstate for t in threads]
    dtvs = dtv_words(memory, roots.dead_stacks)
    values = b"".join([*(w for _, w in kernel), register_words(regs), jit, dtvs])
    result = sweep(
        memory,
        registry,
        roots,
        values,
        None,
        mark_threads or default_mark_threads(),
        mappings,
    )
    note("marked")
    leaks, types = fold_leaks(result.leaks, limit, memory, pid, mappings, not contents)
    note("folded")
    entries = [
        LeakEntry(
            address=leak.begin,
            **leak_counts(leak),
            contents=_contents(memory, leak.begin, leak.size) if contents or i < sample else None,
            backtrace=[],
            type=types.get(leak.begin, ""),
        )
        for i, leak in enumerate(leaks)
    ]
    return result, roots, entries


def _report(
    pid: int,
    command: str,
    result: SweepResult,
    roots: Roots,
    entries: list[LeakEntry],
    pause_ms: float,
    started: float,
    snapshot: str,
    threads: int,
    snapshot_note: str = "",
) -> ScanReport:
    return ScanReport(
        pid=pid,
        command=command,
        leak_count=result.unreachable_count,
        leak_bytes=result.unreachable_bytes,
        allocation_count=result.allocation_count,
        allocation_bytes=result.allocation_bytes,
        pause_ms=pause_ms,
        scan_ms=(time.monotonic() - started) * 1000,
        snapshot=snapshot,
        threads=threads,
        leaks=entries,
        roots=dict(roots.kinds),
        pages_skipped=result.pages_skipped,
        bytes_scanned=result.bytes_scanned,
        sweep=result.place,
        mark_threads=result.mark_threads,
        allocations=ALLOCATIONS,
        snapshot_note=snapshot_note,
    )


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
    if not 31 <= facts.minor <= 41:
        raise TargetNotShimmed(
            f"{core.path} is of a process with glibc {facts.version}, whose heap layout is not"
            " known here (2.31 to 2.41 are)"
        )
    return GlibcLibc(first, first.start, facts)


def sweep_glibc_core(
    core: CoreFile,
    limit: int,
    contents: bool,
    mark_threads: int,
    note: Callable[[str], None],
    started: float,
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
    result, roots, entries = _sweep_copy(
        memory,
        core.mappings,
        core.threads,
        [],
        libc,
        allocs,
        limit,
        contents,
        mark_threads,
        note,
        core.guards_listed,
    )
    note("done")
    return _report(
        core.pid,
        core.command,
        result,
        roots,
        entries,
        0.0,
        started,
        "core",
        len(core.threads),
        "; ".join(core.notes),
    )
