"""One scan, stage by stage: capture -> allocations -> roots -> sweep -> fold -> symbolize.

The target is paused only inside capture (or, in "stopped" mode, until the
sweep ends); symbolization runs after it has been released.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from unreachable.allocations.registry import read_registry
from unreachable.capture.stop_world import SnapshotMode, stop_world
from unreachable.capture.target import open_target, still_running
from unreachable.errors import InvalidArgument, TargetNotFound
from unreachable.fold.dedup import dedup
from unreachable.process.maps import read_maps
from unreachable.report.model import LeakEntry, ScanReport
from unreachable.roots.classify import classify, register_words
from unreachable.roots.exited_threads import dtv_words
from unreachable.roots.glibc_arena import find_main_arena
from unreachable.sweep.mark import sweep
from unreachable.symbolize.frames import Symbolizer
from unreachable.symbolize.stacks import read_stacks

CONTENTS_BYTES = 32
Progress = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class ScanOptions:
    limit: int = 100
    contents: bool = False
    snapshot: SnapshotMode = "auto"


def _read_contents(mem_pid: int, addr: int, size: int) -> bytes:
    fd = os.open(f"/proc/{mem_pid}/mem", os.O_RDONLY)
    try:
        return os.pread(fd, min(size, CONTENTS_BYTES), addr)
    except OSError:
        return b""
    finally:
        os.close(fd)


def scan(
    pid: int, options: ScanOptions = ScanOptions(), progress: Progress | None = None
) -> ScanReport:
    if options.limit < 0:
        raise InvalidArgument("--limit must be >= 0")
    note = progress or (lambda _stage: None)
    started = time.monotonic()
    target = open_target(pid)

    try:
        with stop_world(target, options.snapshot) as capture:
            note("captured")
            mem_pid = capture.mem_pid
            mappings = read_maps(mem_pid)
            registry = read_registry(mem_pid, target.shim.descriptor_addr)
            note("allocations")
            sps = {t.tid: t.sp for t in capture.threads}
            arena = find_main_arena(mem_pid, mappings)
            roots = classify(mappings, sps, registry, target.shim.path, [arena] if arena else [])
            regs = register_words(
                [t.regs for t in capture.threads] + [t.xstate for t in capture.threads]
            ) + dtv_words(mem_pid, roots.dead_stacks)
            result = sweep(mem_pid, registry, roots, regs)
            note("marked")
            leaks = dedup(result.leaks, registry, options.limit, result.excluded)
            note("folded")
            contents = {
                leak.begin: _read_contents(mem_pid, leak.begin, leak.size)
                for leak in leaks
                if options.contents
            }
            stack_ids = {leak.stack_id for leak in leaks if leak.stack_id}
            stacks = read_stacks(mem_pid, target.shim.descriptor_addr, stack_ids)
            snapshot_kind = capture.snapshot
            threads = len(capture.threads)
    except ProcessLookupError:
        # The target (or its frozen copy) vanished between two reads.
        raise TargetNotFound(f"process {pid} exited during the scan") from None
    pause_ms = capture.pause_ms

    if not still_running(pid):
        raise TargetNotFound(f"process {pid} exited during the scan")
    frames = Symbolizer(pid, mappings).symbolize(stacks)
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
            contents=contents.get(leak.begin) if options.contents else None,
            backtrace=frames.get(leak.stack_id, []),
        )
        for leak in leaks
    ]
    note("done")
    return ScanReport(
        pid=pid,
        command=target.command,
        leak_count=result.unreachable_count,
        leak_bytes=result.unreachable_bytes,
        allocation_count=registry.count,
        allocation_bytes=registry.total_bytes,
        pause_ms=pause_ms,
        scan_ms=(time.monotonic() - started) * 1000,
        snapshot=snapshot_kind,
        threads=threads,
        leaks=entries,
        roots=dict(roots.kinds),
        pages_skipped=result.pages_skipped,
        bytes_scanned=result.bytes_scanned,
    )
