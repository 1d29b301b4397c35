"""One scan, stage by stage: capture -> allocations -> roots -> sweep -> fold -> symbolize.

The target is paused only inside capture (in "stopped" mode, until the memory
the sweep needs is copied); symbolization runs after it has been released.
In "copy" mode every stage reads the copy made in capture
(capture/copy_snapshot.py), the target running on.

In fork mode the snapshot child sweeps itself (sweep/child.py): it starts
building its allocation index as soon as this process has read its maps, and
this process only computes the roots and reads back the leaks. If that fails,
the scan sweeps the frozen child from outside instead, or, if the child died,
takes a new snapshot and does so; a scan never gets worse than the outside
sweep. It also sweeps from outside when the target's memory cgroup has too
little room left for the child's scratch (process/cgroup_memory.py); a sweep
from outside that this process's own memory cgroup could not hold is refused
before it starts.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Literal

from unreachable import _native
from unreachable.allocations.registry import read_registry
from unreachable.capture.copy_snapshot import COPY_FROM_BYTES, NEVER_COPY
from unreachable.capture.stop_world import SnapshotMode, stop_world
from unreachable.capture.target import Target, open_target, still_running
from unreachable.errors import (
    InvalidArgument,
    ScannerOutOfMemory,
    TargetNotFound,
    TargetNotShimmed,
    TargetUnscannable,
)
from unreachable.fold.types import fold_leaks
from unreachable.process.cgroup_memory import (
    memory_headroom,
    no_room_for_child_sweep,
    no_room_for_outside_sweep,
    scanner_cache_budget,
)
from unreachable.process.maps import Mapping, read_maps
from unreachable.process.memory import Memory, memory_reader, present_ranges
from unreachable.process.status import resident_anonymous_bytes
from unreachable.report.model import LeakEntry, ScanReport, leak_counts
from unreachable.roots.classify import Roots, classify, register_words
from unreachable.roots.exited_threads import dtv_words
from unreachable.roots.glibc_arena import find_main_arena
from unreachable.roots.glibc_heaps import MAX_LISTED, Span, heap_parts, registry_blocks_in
from unreachable.roots.heap_words import anonymous_spans, heap_spans, words_in
from unreachable.roots.jit_code import code_words
from unreachable.roots.signal_stacks import altstack_words
from unreachable.scan_glibc import runs_without_shim, scan_without_shim
from unreachable.sweep.child import ChildSweeper, ChildSweepFailed, default_mark_threads
from unreachable.sweep.mark import SweepResult, sweep, sweep_in_child
from unreachable.symbolize.frames import Symbolizer
from unreachable.symbolize.stacks import read_stacks
from unreachable.symbolize.unloaded import read_loaded_objects

if TYPE_CHECKING:
    from unreachable.retention.collect import GraphCollector

CONTENTS_BYTES = 32
Progress = Callable[[str], None]
# Where a fork-mode scan sweeps: "auto" in the snapshot child with the outside
# sweep as fallback, "child" only there (fails otherwise), "scanner" outside.
SweepMode = Literal["auto", "child", "scanner"]


@dataclass(frozen=True, slots=True)
class ScanOptions:
    limit: int = 100
    contents: bool = False
    # Contents of the first N entries that have no backtrace (the text
    # report's default: a leak without a backtrace is known by its bytes).
    sample_contents: int = 0
    snapshot: SnapshotMode = "auto"
    sweep: SweepMode = "auto"
    mark_threads: int = 0  # the child's, or a frozen copy's in here; 0: default_mark_threads()
    # seconds symbolization may take (None: no limit; True: UNREACHABLE_SYMBOL_BUDGET or 30)
    symbol_budget: float | None | bool = True


class _ChildGone(Exception):
    """The snapshot child died while sweeping itself: nothing left to read."""


class _KeptOutOfFork(Exception):
    """The target keeps memory out of forks: the snapshot child lacks roots."""


def _expected_allocations(memory: Memory, addr: int) -> int | None:
    """The registry's count of live allocations: its shards' counts and its
    size maps' entries (a read of every map)."""
    try:
        return _native.read_registry(memory, addr, False)["expected"]
    except (OSError, ValueError):
        return None  # reading the registry again below says what is wrong


def _child_room(pid: int, memory: Memory, addr: int, headroom: int | None, root_words: int) -> str:
    """Why sweeping inside the snapshot child would not fit in the target's
    memory cgroup ("" if it would, or if no limit applies)."""
    if headroom is None or (expected := _expected_allocations(memory, addr)) is None:
        return ""
    anonymous = resident_anonymous_bytes(pid)
    return no_room_for_child_sweep(headroom, anonymous, expected, root_words)


@dataclass(frozen=True, slots=True)
class _ScannerRoom:
    """This process's memory cgroup room when the scan began (None: no
    limit) and the part of it its copies of target memory may take."""

    at_start: int | None
    cache_budget: int

    def check_outside_sweep(self, memory: Memory, addr: int, copied: bool, fallback: str) -> None:
        """Refuse, before it allocates, a sweep from outside that would push
        this process over its limit: the kernel would OOM-kill it mid-sweep
        (and under systemd's default OOMPolicy= stop the daemon it runs in).
        A copy already made is charged; otherwise its budget is kept free."""
        if self.at_start is None:
            return
        room = memory_headroom(os.getpid())
        expected = _expected_allocations(memory, addr)
        if room is None or expected is None:
            return
        free = room - (0 if copied else self.cache_budget)
        if why := no_room_for_outside_sweep(free, expected):
            also = f" (the snapshot child did not sweep itself: {fallback})" if fallback else ""
            raise ScannerOutOfMemory(f"{why}; give the scanner more memory{also}")


def _read_contents(memory: Memory, addr: int, size: int) -> bytes:
    with memory_reader(memory) as read:
        try:
            return read(addr, min(size, CONTENTS_BYTES))
        except OSError:
            return b""


def scan(
    pid: int,
    options: ScanOptions = ScanOptions(),
    progress: Progress | None = None,
    graph: GraphCollector | None = None,
) -> ScanReport:
    """graph: the scan also keeps the mark's reference graph and hands it to
    this collector (unreachable/retention: why, retainers); the sweep then
    runs here, never in the snapshot child, which has no way to send it."""
    if options.limit < 0:
        raise InvalidArgument("--limit must be >= 0")
    note = progress or (lambda _stage: None)
    started = time.monotonic()
    try:
        target = open_target(pid)
    except TargetNotShimmed:
        # why and retainers read the shim's registry; so do the helper's snapshots.
        needs_shim = options.snapshot in ("fork", "copy", "concurrent") or options.sweep == "child"
        if needs_shim or graph is not None or not runs_without_shim(pid):
            raise
        # No shim: glibc's own heap, walked from a copy (scan_glibc.py).
        return scan_without_shim(
            pid,
            options.limit,
            options.contents,
            options.mark_threads,
            note,
            started,
            sample=options.sample_contents,
        )
    if options.snapshot == "concurrent":
        if graph is not None:
            raise InvalidArgument("the concurrent snapshot keeps no reference graph")
        from unreachable.capture.concurrent_scan import scan_concurrent

        return scan_concurrent(target, options, note, started)
    in_child = options.sweep != "scanner" and graph is None
    try:
        return _scan(target, options, note, started, in_child, "", graph=graph)
    except _ChildGone as e:
        if options.sweep == "child":
            raise TargetUnscannable(str(e)) from None
        # A new snapshot, swept from outside.
        return _scan(target, options, note, started, False, str(e), graph=graph)
    except _KeptOutOfFork as e:
        if options.snapshot == "fork" or options.sweep == "child":
            raise TargetUnscannable(f"{e}; scan it with --snapshot stopped or copy") from None
        # Once more without a child: a copy, or stopped.
        return _scan(target, options, note, started, False, "", no_fork=str(e), graph=graph)


def _scan(
    target: Target,
    options: ScanOptions,
    note: Progress,
    started: float,
    in_child: bool,
    fallback: str,
    no_fork: str = "",
    graph: GraphCollector | None = None,
) -> ScanReport:
    pid = target.pid
    addr = target.shim.descriptor_addr
    forked = False
    room_at_start = memory_headroom(os.getpid())
    own = _ScannerRoom(room_at_start, scanner_cache_budget(room_at_start))
    _native.set_cache_budget(own.cache_budget)
    try:
        # Only a fork snapshot has a child to sweep in: "auto" then never copies.
        # Once a fork had too much kept out of it, a copy of any size beats
        # a stopped scan.
        needs_fork = options.sweep == "child"
        copy_from = NEVER_COPY if needs_fork else 0 if no_fork else COPY_FROM_BYTES
        with stop_world(
            target, options.snapshot, copy_from, no_fork, needs_fork=needs_fork
        ) as capture:
            note("captured")
            forked = capture.snapshot == "fork"
            mem_pid = capture.mem_pid
            memory = capture.memory
            # A child's maps were read before it ran a single instruction: its
            # own memory (stack, inbox, scratch) never becomes a root.
            mappings = capture.mappings or read_maps(mem_pid)
            if forked and capture.kept_out.too_big:
                raise _KeptOutOfFork(capture.kept_out.too_big)
            # Memory the child lacks, read from the target while it was stopped,
            # and of it the words that may point into the heap (roots/heap_words.py).
            kept_out = capture.kept_out.words if forked else b""
            kept_out_words = words_in(kept_out, anonymous_spans(mappings)) if kept_out else b""
            kept_out_code = capture.kept_out.code if forked else b""
            child: ChildSweeper | None = None
            if in_child and forked:
                if not target.header.child_box:
                    fallback = "the shim in the target has no in-child sweep"
                elif options.sweep != "child" and (
                    no_room := _child_room(pid, memory, addr, capture.headroom, len(kept_out_words))
                ):
                    fallback = no_room
                else:
                    try:
                        child = ChildSweeper(capture.session, target.header.child_box)
                    except ChildSweepFailed as e:
                        if not e.frozen:  # nothing left to sweep from outside either
                            raise _ChildGone(str(e)) from None
                        fallback = str(e)
            elif in_child and options.sweep == "child":
                raise TargetUnscannable(
                    f"no in-child sweep without a snapshot child: {capture.snapshot_error}"
                )
            if child is None:
                own.check_outside_sweep(memory, addr, capture.snapshot == "copy", fallback)
            registry = read_registry(memory, addr, entries=child is None)
            present = partial(present_ranges, memory)
            sps = {t.tid: t.sp for t in capture.threads}
            arena = find_main_arena(memory, mappings)
            # Words that are roots wherever they lie: registers, memory the
            # child lacks, pointers the kernel holds.
            held = capture.kernel_held
            epoll = held.epoll_words() if held else b""
            timers = held.timer_words() if held else b""
            signals = held.signal_words() if held else b""
            # Bytes in pipes and sockets: only values within the heap's bounds.
            anonymous = anonymous_spans(mappings)
            pipes = held.in_flight.pipe_words(anonymous) if held else b""
            sockets = held.in_flight.socket_words(anonymous) if held else b""
            header = target.header
            altstacks = altstack_words(
                memory, header.altstacks, header.num_altstacks, {t.tid for t in capture.threads}
            )
            # Where each value root came from, in order (a graph names them).
            value_sources = [
                ("epoll data", epoll),
                ("timer values", timers),
                ("signal values", signals),
                ("pipe data", pipes),
                ("socket data", sockets),
                ("signal stacks", altstacks),
                *((f"registers {t.tid}", register_words([t.regs])) for t in capture.threads),
                *(
                    (f"vector registers {t.tid}", register_words([t.xstate]))
                    for t in capture.threads
                ),
            ]
            values = b"".join(words for _, words in value_sources)
            regs = values

            def roots_in(
                where: Memory, heap: dict[Mapping, list[Span]]
            ) -> tuple[Roots, bytes, bytes]:
                """The roots, and two kinds of words that are roots wherever
                they lie, found with the heap's spans: the JIT code's
                immediates, and the words of the memory the child lacks that
                point into the heap (roots/heap_words.py)."""
                found = classify(
                    mappings,
                    sps,
                    registry,
                    target.shim.path,
                    [arena] if arena else [],
                    heap,
                    present,
                )
                spans = heap_spans(mappings, heap)
                jit = code_words(where, mappings, spans, kept_out_code)
                return found, jit, words_in(kept_out_words, spans)

            result: SweepResult | None = None
            if child is not None:
                try:
                    heap = heap_parts(mem_pid, mappings, partial(child.blocks_in, cap=MAX_LISTED))
                    note("allocations")
                    roots, jit, kept = roots_in(mem_pid, heap)
                    regs += dtv_words(mem_pid, roots.dead_stacks) + jit + kept
                    threads = options.mark_threads or default_mark_threads()
                    result = sweep_in_child(child, registry, roots, regs, mappings, threads)
                except ChildSweepFailed as e:
                    if not e.frozen:
                        raise _ChildGone(str(e)) from None
                    if options.sweep == "child":
                        raise TargetUnscannable(str(e)) from None
                    fallback = str(e)
                    # Frozen with its memory intact: sweep it from here.
                    own.check_outside_sweep(mem_pid, addr, False, fallback)
                    registry = read_registry(mem_pid, addr)
                    regs = values
            if result is None:
                note("allocations")
                roots, jit, kept = roots_in(
                    memory, heap_parts(memory, mappings, registry_blocks_in(registry))
                )
                dtv = dtv_words(memory, roots.dead_stacks)
                regs += dtv + jit + kept
                # Stopped in place: let it go once the walk's memory is read.
                # A frozen child: read first all the same, for a marking team.
                stopped = capture.snapshot == "stopped"
                result = sweep(
                    memory,
                    registry,
                    roots,
                    regs,
                    capture.session if stopped else None,
                    options.mark_threads or default_mark_threads(),
                    mappings,
                    frozen=forked,
                    graph=graph.arguments(
                        roots,
                        registry,
                        mappings,
                        capture.threads,
                        [
                            *value_sources,
                            ("exited threads' control blocks", dtv),
                            ("code immediates", jit),
                            ("kept out of fork", kept),
                        ],
                        memory,
                        held,
                    )
                    if graph
                    else None,
                )
                if graph and result.graph is not None:
                    graph.collect(result.graph, registry, memory, addr, mappings, target.tgid)
            note("marked")
            leaks, types = fold_leaks(
                result.leaks, options.limit, memory, pid, mappings, not options.contents
            )
            note("folded")
            contents = {
                leak.begin: _read_contents(memory, leak.begin, leak.size)
                for i, leak in enumerate(leaks)
                if options.contents or (i < options.sample_contents and not leak.stack_id)
            }
            stack_ids = {leak.stack_id for leak in leaks if leak.stack_id}
            stacks = read_stacks(memory, addr, stack_ids)
            loaded = read_loaded_objects(memory, addr) if stacks else []
            snapshot_kind = capture.snapshot
            # Said when the scan fell back from what was asked (or from auto's
            # first choice); an explicit "stopped" needs no reason.
            snapshot_note = capture.snapshot_error if options.snapshot != "stopped" else ""
            threads = len(capture.threads)
    except (ProcessLookupError, TargetNotFound):
        # The target (or its frozen copy) vanished between two reads. A copy
        # killed under a running target: once more, with a new snapshot. A
        # target paused in place that vanished is dying, however /proc shows
        # it in this instant: no second try.
        if in_child and forked and still_running(pid):
            raise _ChildGone("the snapshot child vanished") from None
        raise TargetNotFound(f"process {target.tgid} exited during the scan") from None
    pause_ms = capture.pause_ms

    if not still_running(pid):
        raise TargetNotFound(f"process {target.tgid} exited during the scan")
    symbolizer = Symbolizer(pid, mappings, unloaded=loaded, budget=options.symbol_budget)
    frames = symbolizer.symbolize(stacks)
    entries = [
        LeakEntry(
            address=leak.begin,
            **leak_counts(leak),
            contents=contents.get(leak.begin),
            backtrace=frames.get(leak.stack_id, []),
            type=types.get(leak.begin, ""),
        )
        for leak in leaks
    ]
    note("done")
    return ScanReport(
        pid=target.tgid,
        command=target.command,
        leak_count=result.unreachable_count,
        leak_bytes=result.unreachable_bytes,
        allocation_count=result.allocation_count,
        allocation_bytes=result.allocation_bytes,
        pause_ms=pause_ms,
        scan_ms=(time.monotonic() - started) * 1000,
        snapshot=snapshot_kind,
        threads=threads,
        leaks=entries,
        roots=dict(roots.kinds)
        | ({"kept out of fork": len(kept_out)} if kept_out else {})
        | ({"epoll data": len(epoll)} if epoll else {})
        | ({"timer values": len(timers)} if timers else {})
        | ({"signal values": len(signals)} if signals else {})
        | ({"pipe data": len(pipes)} if pipes else {})
        | ({"socket data": len(sockets)} if sockets else {})
        | ({"signal stacks": len(altstacks)} if altstacks else {})
        | ({"code immediates": len(jit)} if jit else {}),
        pages_skipped=result.pages_skipped,
        bytes_scanned=result.bytes_scanned,
        sweep=result.place,
        sweep_note=fallback,
        mark_threads=result.mark_threads,
        snapshot_note=snapshot_note,
        symbol_note=symbolizer.note,
    )
