"""A scan with the concurrent snapshot (concurrent.py): its sweep, then the
same stages as every scan (fold, contents, backtraces, symbols), reading the
live target. That is sound: a leaked block cannot be reached, so the target
no longer writes it, and stack-table entries are never rewritten.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from unreachable.capture.concurrent import concurrent_sweep
from unreachable.capture.target import Target, still_running
from unreachable.errors import TargetNotFound, TargetUnscannable
from unreachable.fold.types import fold_leaks
from unreachable.process.memory import memory_reader
from unreachable.report.model import LeakEntry, ScanReport, leak_counts
from unreachable.symbolize.frames import Symbolizer
from unreachable.symbolize.stacks import read_stacks
from unreachable.symbolize.unloaded import read_loaded_objects

if TYPE_CHECKING:
    from unreachable.scan import ScanOptions

CONTENTS_BYTES = 32


def scan_concurrent(
    target: Target, options: ScanOptions, note: Callable[[str], None], started: float
) -> ScanReport:
    pid, addr = target.pid, target.shim.descriptor_addr
    try:
        done = concurrent_sweep(target)
    except (ProcessLookupError, FileNotFoundError):
        raise TargetNotFound(f"process {target.tgid} exited during the scan") from None
    except OSError as e:
        if not still_running(pid):
            raise TargetNotFound(f"process {target.tgid} exited during the scan") from None
        raise TargetUnscannable(f"the concurrent snapshot failed: {e}") from None
    note("marked")
    result, mappings = done.result, done.mappings
    leaks, types = fold_leaks(result.leaks, options.limit, pid, pid, mappings, not options.contents)
    note("folded")
    contents: dict[int, bytes] = {}
    with memory_reader(pid) as read:
        for i, leak in enumerate(leaks):
            if options.contents or (i < options.sample_contents and not leak.stack_id):
                try:
                    contents[leak.begin] = read(leak.begin, min(leak.size, CONTENTS_BYTES))
                except OSError:
                    contents[leak.begin] = b""
    stacks = read_stacks(pid, addr, {leak.stack_id for leak in leaks if leak.stack_id})
    loaded = read_loaded_objects(pid, addr) if stacks else []
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
    p1, p2 = done.pauses_ms
    return ScanReport(
        pid=target.tgid,
        command=target.command,
        leak_count=result.unreachable_count,
        leak_bytes=result.unreachable_bytes,
        allocation_count=result.allocation_count,
        allocation_bytes=result.allocation_bytes,
        pause_ms=done.pause_ms,
        scan_ms=(time.monotonic() - started) * 1000,
        snapshot="concurrent",
        threads=len(done.threads),
        leaks=entries,
        roots=dict(done.roots.kinds) | done.value_counts,
        pages_skipped=result.pages_skipped,
        bytes_scanned=result.bytes_scanned,
        sweep=result.place,
        mark_threads=result.mark_threads,
        snapshot_note=(
            f"two stops, {p1:.1f} ms and {p2:.1f} ms; {done.rescued} candidates rescued,"
            f" {done.gone} freed or reallocated during the mark"
        ),
        symbol_note=symbolizer.note,
    )
