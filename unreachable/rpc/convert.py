"""Between the JSON report, the report model and the proto messages.

The daemon gets reports as JSON from its scan worker (daemon/worker.py) and
sends protos; the CLI turns protos back into the model and prints them with
the same formatters as an embedded scan, so both print the same text. The
report's conversions are derived from the model's fields (report/schema.py).
"""

from __future__ import annotations

from typing import Any

from unreachable.heapdump.model import HeapDump, HeapRecord
from unreachable.model.report import ScanReport
from unreachable.report.schema import (
    SCHEMA_VERSION,
    from_proto,
    proto_text,
    report_from_json,
    to_proto,
)
from unreachable.symbolize.frame import Frame
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
    pb.SNAPSHOT_CONCURRENT: "concurrent",
}
SNAPSHOT_ENUM = {v: k for k, v in SNAPSHOTS.items()}
SWEEPS = {pb.SWEEP_AUTO: "auto", pb.SWEEP_CHILD: "child", pb.SWEEP_SCANNER: "scanner"}
SWEEP_ENUM = {v: k for k, v in SWEEPS.items()}


def frame_from_dict(d: dict[str, Any]) -> pb.Frame:
    return pb.Frame(
        pc=d["pc"],
        map=proto_text(d.get("map") or ""),
        rel_pc=d["rel_pc"],
        function=proto_text(d.get("function") or ""),
        offset=d.get("offset") or 0,
        file=proto_text(d.get("file") or ""),
        line=d.get("line") or 0,
    )


def report_to_proto(report: ScanReport) -> pb.ScanReport:
    """The model as the proto, field by field (report/schema.py)."""
    msg: pb.ScanReport = to_proto(report, pb.ScanReport(schema=SCHEMA_VERSION))
    return msg


def report_from_dict(d: dict[str, Any]) -> pb.ScanReport:
    """A JSON report (the scan worker's, or the CLI's --json output) as a proto."""
    return report_to_proto(report_from_json(d))


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
    return from_proto(ScanReport, r)


def heapdump_from_dict(d: dict[str, Any]) -> pb.HeapDumpResponse:
    """A heap dump as unreachable.heapdump.live.dump_to_dict writes it."""
    return pb.HeapDumpResponse(
        pid=d["pid"],
        command=proto_text(d["command"]),
        total_memory=d["total_memory"],
        backtrace_size=d["backtrace_size"],
        allocation_count=d["allocation_count"],
        pause_ms=d["pause_ms"],
        maps=proto_text(d.get("maps", "")),
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
