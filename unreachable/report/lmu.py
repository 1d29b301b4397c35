"""The report of the shim's libmemunreachable interface (memunreachable.h).

`unreachable-cli scan --format lmu-records PID` writes what native/shim/
memunreachable*.c reads: abi.h's struct ur_lmu_header, a struct ur_lmu_leak
per entry, then the text report's bytes (format_records; abi.h documents
the stream). Nothing in it is parsed as text.

`--format lmu` prints the same for people and scripts, all numbers decimal:

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

from unreachable import _native
from unreachable.model.report import LeakEntry, ScanReport, leak_counts
from unreachable.report.text import format_report

MAGIC = "unreachable-lmu 1"
MAX_FRAMES = _native.LMU_MAX_FRAMES


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


def _leak_record(leak: LeakEntry) -> bytes:
    contents = (leak.contents or b"")[: _native.LMU_CONTENTS_BYTES]
    pcs = [f.pc for f in leak.backtrace[:MAX_FRAMES]]
    fields: dict[str, int | bytes | list[int]] = {
        "begin": leak.address,
        **leak_counts(leak),
        "contents_length": len(contents),
        "contents": contents,
        "num_frames": len(pcs),
        "frames": pcs,
    }
    return _native.abi_encode("ur_lmu_leak", fields)


def format_records(report: ScanReport) -> bytes:
    """The binary stream of abi.h's ur_lmu_header: the totals, the entries,
    the text report as bytes (exactly: no encoding step can change them on
    the way, as a terminal's or a pipe's text encoding could)."""
    text = format_report(report).encode("utf-8", "surrogateescape")
    header = _native.abi_encode(
        "ur_lmu_header",
        {
            "magic": _native.LMU_MAGIC,
            "version": _native.LMU_VERSION,
            "leak_size": _native.abi_sizeof("ur_lmu_leak"),
            "leak_count": report.leak_count,
            "leak_bytes": report.leak_bytes,
            "allocation_count": report.allocation_count,
            "allocation_bytes": report.allocation_bytes,
            "entries": len(report.leaks),
            "text_length": len(text),
        },
    )
    return b"".join([header, *map(_leak_record, report.leaks), text])
