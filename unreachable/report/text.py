"""The text report: libmemunreachable's GetUnreachableMemoryString format.

Two of its quirks are not reproduced: counts stay decimal when no optional
line precedes the contents, and bytes >= 0x80 print as two hex digits.
"""

from __future__ import annotations

from unreachable.model.report import LeakEntry, ScanReport
from unreachable.printable import printable
from unreachable.symbolize.frame import Frame
from unreachable.triage import output as triage

CONTENTS_BYTES = 32


def _plural(n: int) -> str:
    return "" if n == 1 else "s"


def format_frame(index: int, frame: Frame) -> str:
    line = f"          #{index:02d}  pc {frame.rel_pc:016x}  {frame.map or '<unknown>'}"
    if frame.function:
        line += f" ({frame.function}+{frame.offset})"
    if frame.file:
        line += f" {frame.file}:{frame.line}"
    return printable(line)  # the map, function and file names are the target's


def format_leak(leak: LeakEntry) -> list[str]:
    lines = [f"  {leak.size} bytes unreachable at {leak.address:x}"]
    if leak.referenced_count:
        lines.append(
            f"   referencing {leak.referenced_size} unreachable bytes"
            f" in {leak.referenced_count} allocation{_plural(leak.referenced_count)}"
        )
    if leak.similar_count:
        lines.append(
            f"   and {leak.similar_size} similar unreachable bytes"
            f" in {leak.similar_count} allocation{_plural(leak.similar_count)}"
        )
        if leak.similar_referenced_count:
            lines.append(
                f"   referencing {leak.similar_referenced_size} unreachable bytes"
                f" in {leak.similar_referenced_count}"
                f" allocation{_plural(leak.similar_referenced_count)}"
            )
    if leak.type:
        lines.append(f"   type: {leak.type}")
    if leak.contents is not None:
        data = leak.contents
        if len(data) == leak.size:
            lines.append("   contents:")
        else:
            lines.append(f"   first {len(data)} bytes of contents:")
        for i in range(0, len(data), 16):
            chunk = data[i : i + 16]
            hexes = "".join(f"{b:02x} " for b in chunk).ljust(16 * 3)
            text = "".join(chr(b) if 0x20 <= b < 0x7F else "." for b in chunk)
            lines.append(f"   {leak.address + i:x}: {hexes}{text}")
    lines += [format_frame(i, f) for i, f in enumerate(leak.backtrace)]
    return lines


def format_report(report: ScanReport) -> str:
    lines = [
        f"  {report.leak_bytes} bytes in {report.leak_count}"
        f" unreachable allocation{_plural(report.leak_count)}",
        "  ABI: 'x86_64'",
        *_allocations_line(report),
        *_core_line(report),
        "",
    ]
    lines[2:2] = triage.text_header(report)
    for leak in report.leaks:
        lines += triage.text_entry(report, leak, format_leak(leak))
        lines.append("")
    lines += triage.text_footer(report)
    lines += _backtrace_hint(report)
    return "\n".join(lines) + "\n"


# Closes a report whose listed leaks have no allocation backtrace: where to
# get them (after the entries, so libmemunreachable's header stays as it is).
BACKTRACE_HINT = (
    "  no allocation backtraces: to see where these were allocated, restart the process"
    " under the shim with backtrace=16 (unreachable-cli run --options backtrace=16 -- COMMAND)"
)


def _backtrace_hint(report: ScanReport) -> list[str]:
    if not report.leaks or any(leak.backtrace for leak in report.leaks):
        return []
    return [BACKTRACE_HINT, ""]


def _core_line(report: ScanReport) -> list[str]:
    """What a core file lacked, or was read from elsewhere (docs/cli.md)."""
    if report.snapshot != "core" or not report.snapshot_note:
        return []
    return [f"  core file: {report.snapshot_note}"]


def _allocations_line(report: ScanReport) -> list[str]:
    """Said only when the allocations are not the shim's (docs/glibc-heap.md)."""
    if report.allocations == "shim registry":
        return []
    return [
        f"  allocations: {report.allocations} (chunk usable sizes, no backtraces: the"
        " process runs without the shim)"
    ]


def _held(report: ScanReport) -> str:
    # A pause far above its hold was threads slow to reach the stop, not the
    # scan's work in it (docs/pause.md); a scan with no stop has neither.
    return f" (held {report.hold_ms:.2f} ms)" if report.hold_ms > 0 else ""


def _passes(report: ScanReport) -> str:
    # Said only when the mark read blocks again: a heap dense in pointers took
    # a partial reference graph (docs/pause.md), the reason a scan read more
    # than its heap; an ordinary scan makes no pass.
    if report.mark_passes <= 0:
        return ""
    passes = f"{report.mark_passes} pass{'es' if report.mark_passes > 1 else ''}"
    mib = report.mark_bytes_read / (1 << 20)
    return f"; mark: {passes} over blocks left out of its graph, {mib:.1f} MiB read"


def format_summary(report: ScanReport) -> str:
    """One line for logs: libmemunreachable's closing summary plus timings,
    and why the scan fell back to the snapshot it took, or to sweeping it
    from outside, when it did."""
    how = "swept stopped" if report.snapshot == "stopped" else f"{report.snapshot} snapshot"
    stopped = f"; {how}: {report.snapshot_note}" if report.snapshot_note else ""
    if report.sweep_note:
        stopped += f"; swept from outside: {report.sweep_note}"
    if report.symbol_note:
        stopped += f"; symbols: {report.symbol_note}"
    stopped += _passes(report)
    return (
        f"{report.leak_bytes} bytes in {report.leak_count}"
        f" allocation{_plural(report.leak_count)} unreachable out of"
        f" {report.allocation_bytes} bytes in {report.allocation_count}"
        f" allocation{_plural(report.allocation_count)}"
        f" (pid {report.pid}, paused {report.pause_ms:.2f} ms{_held(report)},"
        f" scan {report.scan_ms:.1f} ms"
        f"{stopped})"
    )
