"""Between the JSON report (report_to_dict), the report model and the proto messages.

The daemon gets reports as JSON from its scan subprocess and sends protos;
the CLI turns protos back into the model and prints them with the same
formatters as an embedded scan, so both print the same text.
"""

from __future__ import annotations

from typing import Any

from unreachable.heapdump.model import HeapDump, HeapRecord
from unreachable.report.json_report import SCHEMA_VERSION
from unreachable.report.model import LEAK_COUNTS, LeakEntry, ScanReport, leak_counts
from unreachable.rpc.triage_convert import triage_to_model, triage_to_proto
from unreachable.symbolize.frames import Frame
from unreachable.v1 import unreachable_pb2 as pb

STAGES = {
    "started": pb.SCAN_STAGE_STARTED,
    "attached": pb.SCAN_STAGE_ATTACHED,
    "captured": pb.SCAN_STAGE_CAPTURED,
    "allocations": pb.SCAN_STAGE_ALLOCATIONS,
    "marked": pb.SCAN_STAGE_MARKED,
    "folded": pb.SCAN_STAGE_FOLDED,
    "done": pb.SCAN_STAGE_DONE,
}
SNAPSHOTS = {
    pb.SNAPSHOT_AUTO: "auto",
    pb.SNAPSHOT_FORK: "fork",
    pb.SNAPSHOT_STOPPED: "stopped",
    pb.SNAPSHOT_COPY: "copy",
}
SNAPSHOT_ENUM = {v: k for k, v in SNAPSHOTS.items()}
SWEEPS = {pb.SWEEP_AUTO: "auto", pb.SWEEP_CHILD: "child", pb.SWEEP_SCANNER: "scanner"}
SWEEP_ENUM = {v: k for k, v in SWEEPS.items()}


def frame_from_dict(d: dict[str, Any]) -> pb.Frame:
    return pb.Frame(
        pc=d["pc"],
        map=d.get("map") or "",
        rel_pc=d["rel_pc"],
        function=d.get("function") or "",
        offset=d.get("offset") or 0,
        file=d.get("file") or "",
        line=d.get("line") or 0,
    )


def report_from_dict(d: dict[str, Any], *, keep_contents: bool = True) -> pb.ScanReport:
    """A report_to_dict() dict (the CLI's --json output) as a proto."""
    leaks = [leak_from_dict(leak, keep_contents) for leak in d["leaks"]]
    msg = pb.ScanReport(
        schema=d.get("schema", SCHEMA_VERSION),
        pid=d["pid"],
        command=d["command"],
        leak_count=d["leak_count"],
        leak_bytes=d["leak_bytes"],
        allocation_count=d["allocation_count"],
        allocation_bytes=d["allocation_bytes"],
        pause_ms=d["pause_ms"],
        scan_ms=d["scan_ms"],
        snapshot=d["snapshot"],
        snapshot_note=d.get("snapshot_note", ""),
        sweep=d.get("sweep", ""),
        sweep_note=d.get("sweep_note", ""),
        mark_threads=d.get("mark_threads", 1),
        allocations=d.get("allocations", ""),
        symbol_note=d.get("symbol_note", ""),
        threads=d["threads"],
        bytes_scanned=d["bytes_scanned"],
        pages_skipped=d["pages_skipped"],
        roots=[pb.RootBytes(kind=k, bytes=v) for k, v in d["roots"].items()],
        leaks=leaks,
    )
    triage_to_proto(d, msg, lambda leak: leak_from_dict(leak, keep_contents))
    return msg


def leak_from_dict(leak: dict[str, Any], keep_contents: bool = True) -> pb.Leak:
    msg = pb.Leak(
        address=leak["address"],
        **{name: leak[name] for name in LEAK_COUNTS},
        backtrace=[frame_from_dict(f) for f in leak["backtrace"]],
        type=leak.get("type", ""),
    )
    if keep_contents and "contents_hex" in leak:
        msg.contents = bytes.fromhex(leak["contents_hex"])
    return msg


def strip_contents(report: pb.ScanReport) -> pb.ScanReport:
    suppressed = [x.leak for x in report.suppressed.leaks]
    if not any(leak.HasField("contents") for leak in [*report.leaks, *suppressed]):
        return report
    copy = pb.ScanReport()
    copy.CopyFrom(report)
    for leak in [*copy.leaks, *(x.leak for x in copy.suppressed.leaks)]:
        leak.ClearField("contents")
    return copy


def frame_to_model(f: pb.Frame) -> Frame:
    return Frame(f.pc, f.map, f.rel_pc, f.function, f.offset, f.file, f.line)


def report_to_model(r: pb.ScanReport) -> ScanReport:
    """The proto as the model the CLI's formatters print."""
    report = ScanReport(
        pid=r.pid,
        command=r.command,
        leak_count=r.leak_count,
        leak_bytes=r.leak_bytes,
        allocation_count=r.allocation_count,
        allocation_bytes=r.allocation_bytes,
        pause_ms=r.pause_ms,
        scan_ms=r.scan_ms,
        snapshot=r.snapshot,
        sweep=r.sweep or "scanner",
        threads=r.threads,
        leaks=[leak_to_model(leak) for leak in r.leaks],
        roots={root.kind: root.bytes for root in r.roots},
        pages_skipped=r.pages_skipped,
        bytes_scanned=r.bytes_scanned,
        snapshot_note=r.snapshot_note,
        sweep_note=r.sweep_note,
        mark_threads=r.mark_threads or 1,
        allocations=r.allocations or "shim registry",
        symbol_note=r.symbol_note,
    )
    triage_to_model(r, report, leak_to_model)
    return report


def leak_to_model(leak: pb.Leak) -> LeakEntry:
    return LeakEntry(
        address=leak.address,
        **leak_counts(leak),
        contents=leak.contents if leak.HasField("contents") else None,
        backtrace=[frame_to_model(f) for f in leak.backtrace],
        type=leak.type,
    )


def heapdump_from_dict(d: dict[str, Any]) -> pb.HeapDumpResponse:
    """A heap dump as unreachable.heapdump.live.dump_to_dict writes it."""
    return pb.HeapDumpResponse(
        pid=d["pid"],
        command=d["command"],
        total_memory=d["total_memory"],
        backtrace_size=d["backtrace_size"],
        allocation_count=d["allocation_count"],
        pause_ms=d["pause_ms"],
        maps=d.get("maps", ""),
        fingerprint=d.get("fingerprint", ""),
        records=[
            pb.HeapRecord(
                size=r["size"],
                num_allocations=r["num_allocations"],
                frames=[frame_from_dict(f) for f in r["frames"]],
            )
            for r in d["records"]
        ],
    )


def heapdump_to_model(h: pb.HeapDumpResponse) -> HeapDump:
    return HeapDump(
        pid=h.pid,
        command=h.command,
        total_memory=h.total_memory,
        backtrace_size=h.backtrace_size,
        allocation_count=h.allocation_count,
        pause_ms=h.pause_ms,
        maps=h.maps,
        fingerprint=h.fingerprint,
        records=[
            HeapRecord(
                size=r.size,
                num_allocations=r.num_allocations,
                frames=[frame_to_model(f) for f in r.frames],
            )
            for r in h.records
        ],
    )
