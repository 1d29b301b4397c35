"""Stage report: the one place a ScanReport is built, whatever the
snapshot and the allocation source."""

from __future__ import annotations

import time
from dataclasses import dataclass

from unreachable.model.report import LeakEntry, ScanReport, leak_counts
from unreachable.scan.fold import Folded
from unreachable.scan.symbolize import Symbolized
from unreachable.sweep.mark import SweepResult


@dataclass(slots=True, eq=False, repr=False)
class Scanned:
    """What the scan was of and how it held it."""

    pid: int  # the process's id, as reports name it
    command: str
    snapshot: str  # "fork", "copy", "stopped", "concurrent" or "core"
    threads: int
    pause_ms: float
    started: float  # time.monotonic() when the scan began
    snapshot_note: str = ""
    sweep_note: str = ""
    hold_ms: float = 0.0  # the pause from its last thread stopped on


def join_notes(*notes: str) -> str:
    return "; ".join(n for n in notes if n)


def build_report(
    scanned: Scanned,
    result: SweepResult,
    folded: Folded,
    symbolized: Symbolized,
    roots: dict[str, int],
    allocations: str,
) -> ScanReport:
    entries = [
        LeakEntry(
            address=leak.begin,
            **leak_counts(leak),
            contents=folded.contents.get(leak.begin),
            backtrace=symbolized.frames.get(leak.stack_id, []),
            type=folded.types.get(leak.begin, ""),
        )
        for leak in folded.leaks
    ]
    return ScanReport(
        pid=scanned.pid,
        command=scanned.command,
        leak_count=result.unreachable_count,
        leak_bytes=result.unreachable_bytes,
        allocation_count=result.allocation_count,
        allocation_bytes=result.allocation_bytes,
        pause_ms=scanned.pause_ms,
        scan_ms=(time.monotonic() - scanned.started) * 1000,
        snapshot=scanned.snapshot,
        threads=scanned.threads,
        leaks=entries,
        hold_ms=scanned.hold_ms,
        roots=roots,
        pages_skipped=result.pages_skipped,
        bytes_scanned=result.bytes_scanned,
        allocations=allocations,
        sweep=result.place,
        sweep_note=scanned.sweep_note,
        mark_threads=result.mark_threads,
        mark_passes=result.mark_passes,
        mark_bytes_read=result.mark_bytes_read,
        snapshot_note=scanned.snapshot_note,
        symbol_note=symbolized.note,
    )
