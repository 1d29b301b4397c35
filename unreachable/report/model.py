"""What a scan found, independent of how it is printed."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from unreachable.symbolize.frames import Frame

# The counts every leak entry carries, by the same names in the fold, this
# model, the JSON schema and the proto.
LEAK_COUNTS = (
    "size",
    "referenced_count",
    "referenced_size",
    "similar_count",
    "similar_size",
    "similar_referenced_count",
    "similar_referenced_size",
    "total_size",
)


def leak_counts(source: Any) -> dict[str, int]:
    """LEAK_COUNTS read off anything that has them as attributes."""
    return {name: int(getattr(source, name)) for name in LEAK_COUNTS}


@dataclass(slots=True)
class LeakEntry:
    address: int
    size: int
    referenced_count: int
    referenced_size: int
    similar_count: int
    similar_size: int
    similar_referenced_count: int
    similar_referenced_size: int
    total_size: int
    contents: bytes | None = None  # first <= 32 bytes, only when asked for
    backtrace: list[Frame] = field(default_factory=list)


@dataclass(slots=True)
class ScanReport:
    pid: int
    command: str
    leak_count: int  # every unreachable allocation, not only the reported entries
    leak_bytes: int
    allocation_count: int
    allocation_bytes: int
    pause_ms: float
    scan_ms: float
    # "fork": frozen copy-on-write child; "copy": copied while running, then
    # brought up to date while paused; "stopped": swept while paused
    snapshot: str
    threads: int
    leaks: list[LeakEntry]
    roots: dict[str, int] = field(default_factory=dict)  # bytes per root/skip class
    pages_skipped: int = 0
    bytes_scanned: int = 0
    # Where the mark ran: "child" (the snapshot child swept its own memory) or
    # "scanner" (this process read the target or child through /proc).
    sweep: str = "scanner"
    sweep_note: str = ""  # why a fork snapshot was not swept in the child, if it was meant to be
    mark_threads: int = 1  # threads that marked (in the child: at most the target's CPUs)
    snapshot_note: str = ""  # why the scan fell back to this snapshot, if it did
    symbol_note: str = ""  # frames left unsymbolized (time budget) or files not read, and why
