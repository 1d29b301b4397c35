"""The JSON report; its schema is documented in docs/report-schema.md."""

from __future__ import annotations

import json
from typing import Any

from unreachable.report.model import LeakEntry, ScanReport, leak_counts
from unreachable.symbolize.frames import frame_to_dict
from unreachable.triage import output as triage

SCHEMA_VERSION = 1


def leak_to_dict(leak: LeakEntry) -> dict[str, Any]:
    d: dict[str, Any] = {
        "address": leak.address,
        **leak_counts(leak),
        "backtrace": [frame_to_dict(f) for f in leak.backtrace],
        "type": leak.type,
    }
    if leak.contents is not None:
        d["contents_hex"] = leak.contents.hex()
    return d


def report_to_dict(report: ScanReport) -> dict[str, Any]:
    return {
        "schema": SCHEMA_VERSION,
        "pid": report.pid,
        "command": report.command,
        "leak_count": report.leak_count,
        "leak_bytes": report.leak_bytes,
        "allocation_count": report.allocation_count,
        "allocation_bytes": report.allocation_bytes,
        "allocations": report.allocations,
        "pause_ms": round(report.pause_ms, 3),
        "scan_ms": round(report.scan_ms, 3),
        "snapshot": report.snapshot,
        "snapshot_note": report.snapshot_note,
        "sweep": report.sweep,
        "sweep_note": report.sweep_note,
        "symbol_note": report.symbol_note,
        "mark_threads": report.mark_threads,
        "threads": report.threads,
        "bytes_scanned": report.bytes_scanned,
        "pages_skipped": report.pages_skipped,
        "roots": dict(report.roots),
        "leaks": [triage.json_leak(report, leak, leak_to_dict(leak)) for leak in report.leaks],
    } | triage.json_fields(report, leak_to_dict)


def format_json(report: ScanReport) -> str:
    return json.dumps(report_to_dict(report), indent=2) + "\n"
