"""ScanReport objects built by hand for tests of reporters and formats."""

from __future__ import annotations

from typing import Any

from unreachable.model.report import LeakEntry, ScanReport
from unreachable.symbolize.frames import Frame


def make_report(leaks: list[LeakEntry], **fields: Any) -> ScanReport:
    """A report around `leaks`; `fields` override the totals and metadata."""
    values: dict[str, Any] = {
        "pid": 1,
        "command": "x",
        "leak_count": len(leaks),
        "leak_bytes": sum(leak.size for leak in leaks),
        "allocation_count": 20,
        "allocation_bytes": 2000,
        "pause_ms": 0.5,
        "scan_ms": 3.0,
        "snapshot": "fork",
        "threads": 1,
    }
    values.update(fields)
    return ScanReport(leaks=leaks, **values)


def folded_leak(contents: bytes | None, backtrace: list[Frame]) -> LeakEntry:
    """One leak with every optional line of libmemunreachable's format:
    24 bytes that reference 2 blocks (160 bytes) and have 3 similar ones."""
    return LeakEntry(
        address=0x7B2C4E8010,
        size=24,
        referenced_count=2,
        referenced_size=160,
        similar_count=3,
        similar_size=72,
        similar_referenced_count=6,
        similar_referenced_size=480,
        total_size=736,
        contents=contents,
        backtrace=backtrace,
    )
