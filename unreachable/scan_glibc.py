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
    UNDER_SHIM,
    GlibcLibc,
    HeapBusy,
    HeapWalkFailed,
    find_libc,
    program_counter,
    thread_pointer,
    thread_tcaches,
    tls_offsets,
    walk,
)
from unreachable.allocations.registry import THREAD_EXITED, Registry, ThreadSlot
from unreachable.capture.copy_snapshot import sync_ranges
from unreachable.capture.kernel_held import KernelHeld
from unreachable.capture.stop_world import CapturedThread
from unreachable.capture.target import still_running
from unreachable.errors import (
    ScanError,
    ScannerOutOfMemory,
    TargetNotFound,
    TargetNotShimmed,
    TargetPermissionDenied,
    TargetUnscannable,
)
from unreachable.fold.dedup import dedup
from unreachable.process.mapped_file import mapped_path
from unreachable.process.maps import Mapping, read_maps
from unreachable.process.memory import present_ranges
from unreachable.process.secure_exec import runs_secure
from unreachable.process.status import check_scannable
from unreachable.report.model import LeakEntry, ScanReport
from unreachable.roots.classify import classify, register_words
from unreachable.roots.exited_threads import SEARCH_TOP, dtv_words
from unreachable.roots.glibc_heaps import heap_parts, registry_blocks_in
from unreachable.roots.heap_words import anonymous_spans, heap_spans
from unreachable.roots.jit_code import code_words
from unreachable.sweep.child import default_mark_threads
from unreachable.sweep.mark import sweep

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


def _translate(pid: int, e: OSError) -> Exception:
    if isinstance(e, ProcessLookupError) or not still_running(pid):
        return TargetNotFound(f"process {pid} exited before or during the scan")
    if isinstance(e, PermissionError):
        return TargetPermissionDenied(f"cannot stop pid {pid}: {e.strerror or e}")
    return TargetUnscannable(f"cannot stop pid {pid}: {e}")


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
            raise _translate(pid, e) from None
        lo, hi = libc.malloc_code
        if hi:
            # Let just those threads run out of malloc.
            try:
                left, raw = session.run_out(lo, hi, RUN_OUT_ROUNDS)
            except OSError as e:
                raise _translate(pid, e) from None
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
            raise _translate(pid, e) from None
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
    memory: _native.MemoryCopy, mappings: list[Mapping], threads: list[CapturedThread]
) -> list[ThreadSlot]:
    """Stacks glibc keeps for reuse after their threads exited (the shim
    records them; here they are recognised): an anonymous mapping right
    above a guard, with no live thread's SP in it and a thread control
    block at its top (tcbhead_t's tcb and self pointing at it) that is no
    live thread's thread pointer. Not roots: a dead thread's frames and TLS
    would keep its leaks alive."""
    sps = [t.sp for t in threads]
    tps = {thread_pointer(t.regs) for t in threads}
    out = []
    for below, m in zip(mappings, mappings[1:], strict=False):
        if not (m.anonymous and m.readable and m.writable and m.private):
            continue
        if below.end != m.start or below.perms[:3] != "---":
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
) -> ScanReport:
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
        memory, mappings = got.copy, got.mappings
        n = len(allocs) // 16
        registry = Registry(
            allocs=memoryview(allocs).cast("Q"),
            stack_ids=memoryview(bytes(4 * n)).cast("I"),
            threads=_cached_stacks(got.copy, got.mappings, got.threads),
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
            {t.tid: t.sp for t in got.threads},
            registry,
            NO_SHIM_PATH,
            [(arena, arena + ARENA_SIZE)],
            heap,
            partial(present_ranges, memory),
        )
        jit = code_words(memory, mappings, heap_spans(mappings, heap))
        held = got.held
        anonymous = anonymous_spans(mappings)
        epoll, timers, signals = held.epoll_words(), held.timer_words(), held.signal_words()
        pipes = held.in_flight.pipe_words(anonymous)
        sockets = held.in_flight.socket_words(anonymous)
        regs = [t.regs for t in got.threads] + [t.xstate for t in got.threads]
        dtvs = dtv_words(memory, roots.dead_stacks)
        values = b"".join((epoll, timers, signals, pipes, sockets, register_words(regs), jit, dtvs))
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
        leaks = dedup(result.leaks, limit)
        note("folded")
        entries = [
            LeakEntry(
                address=leak.begin,
                size=leak.size,
                referenced_count=leak.referenced_count,
                referenced_size=leak.referenced_size,
                similar_count=leak.similar_count,
                similar_size=leak.similar_size,
                similar_referenced_count=leak.similar_referenced_count,
                similar_referenced_size=leak.similar_referenced_size,
                total_size=leak.total_size,
                contents=_contents(memory, leak.begin, leak.size) if contents else None,
            )
            for leak in leaks
        ]
    finally:
        got.close()
    if not still_running(proc):
        raise TargetNotFound(f"process {pid} exited during the scan")
    note("done")
    return ScanReport(
        pid=pid,
        command=_command_line(proc),
        leak_count=result.unreachable_count,
        leak_bytes=result.unreachable_bytes,
        allocation_count=result.allocation_count,
        allocation_bytes=result.allocation_bytes,
        pause_ms=got.pause_ms,
        scan_ms=(time.monotonic() - started) * 1000,
        snapshot="stopped",
        threads=len(got.threads),
        leaks=entries,
        roots=dict(roots.kinds)
        | ({"epoll data": len(epoll)} if epoll else {})
        | ({"timer values": len(timers)} if timers else {})
        | ({"signal values": len(signals)} if signals else {})
        | ({"pipe data": len(pipes)} if pipes else {})
        | ({"socket data": len(sockets)} if sockets else {})
        | ({"code immediates": len(jit)} if jit else {}),
        pages_skipped=result.pages_skipped,
        bytes_scanned=result.bytes_scanned,
        sweep=result.place,
        mark_threads=result.mark_threads,
        allocations=ALLOCATIONS,
    )


def _command_line(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""
