"""The report read by the shim's libmemunreachable interface (memunreachable.h).

`unreachable-cli scan --format lmu PID` prints, for native/shim/memunreachable.c
to parse without a JSON parser, all numbers decimal:

    unreachable-lmu 1
    totals LEAK_COUNT LEAK_BYTES ALLOCATION_COUNT ALLOCATION_BYTES ENTRIES
    leak BEGIN SIZE REF_COUNT REF_SIZE SIM_COUNT SIM_SIZE SIM_REF_COUNT SIM_REF_SIZE
         TOTAL_SIZE CONTENTS NFRAMES PC...          (one line per entry)
    text NBYTES
    <the text report, exactly as --format text prints it: NBYTES bytes of UTF-8>
    end

CONTENTS is the leak's first <= 32 bytes in lowercase hex, or `-` without
--contents; PCs are absolute, innermost first, at most 16 (libmemunreachable's
Leak::Backtrace::max_frames).
"""

from __future__ import annotations

from unreachable.report.model import LeakEntry, ScanReport
from unreachable.report.text import format_report

MAGIC = "unreachable-lmu 1"
MAX_FRAMES = 16


def _leak_line(leak: LeakEntry) -> str:
    contents = leak.contents.hex() if leak.contents else "-"
    pcs = [f.pc for f in leak.backtrace[:MAX_FRAMES]]
    fields = [
        leak.address,
        leak.size,
        leak.referenced_count,
        leak.referenced_size,
        leak.similar_count,
        leak.similar_size,
        leak.similar_referenced_count,
        leak.similar_referenced_size,
        leak.total_size,
    ]
    return " ".join(["leak", *map(str, fields), contents, str(len(pcs)), *map(str, pcs)])


def format_lmu(report: ScanReport) -> str:
    text = format_report(report).encode()
    head = [
        MAGIC,
        f"totals {report.leak_count} {report.leak_bytes} {report.allocation_count}"
        f" {report.allocation_bytes} {len(report.leaks)}",
        *(_leak_line(leak) for leak in report.leaks),
        f"text {len(text)}",
    ]
    return "\n".join(head) + "\n" + text.decode() + "end\n"
