"""ScanReport objects built by hand for tests of reporters and formats."""

from __future__ import annotations

from typing import Any

from unreachable.report.model import LeakEntry, ScanReport


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
