"""`unreachable-cli scan --format lmu-records`: what native/shim/memunreachable*.c
reads (abi.h's ur_lmu stream), and its text form `--format lmu`."""

from __future__ import annotations

from tests.support.reports import folded_leak, make_report
from unreachable import _native
from unreachable.cli.scan import FORMATS, render
from unreachable.model.report import LeakEntry, ScanReport
from unreachable.report.lmu import format_lmu, format_records
from unreachable.report.text import format_report
from unreachable.symbolize.frames import Frame


def _report(leaks: list[LeakEntry]) -> ScanReport:
    return make_report(leaks, leak_count=7, leak_bytes=736)


def _leak(contents: bytes | None, frames: int) -> LeakEntry:
    return folded_leak(contents, [Frame(0x1000 + i, "/lib/x.so", i, "f", 1) for i in range(frames)])


def test_records_then_the_exact_text_report():
    leaks = [_leak(b"hello\0\xff", 20), _leak(None, 0)]
    out = format_lmu(_report(leaks))
    head, _, rest = out.partition("\ntext ")
    assert head.splitlines() == [
        "unreachable-lmu 1",
        "totals 7 736 20 2000 2",
        f"leak {0x7B2C4E8010} 24 2 160 3 72 6 480 736 68656c6c6f00ff 16 "
        + " ".join(str(0x1000 + i) for i in range(16)),
        f"leak {0x7B2C4E8010} 24 2 160 3 72 6 480 736 - 0",
    ]
    count, _, body = rest.partition("\n")
    text = format_report(_report(leaks))
    assert int(count) == len(text.encode())
    assert body == text + "end\n"


def test_no_leak_and_cli_wiring():
    assert "lmu" in FORMATS
    out = render(_report([]), "lmu")
    assert out.startswith("unreachable-lmu 1\ntotals 7 736 20 2000 0\ntext ")
    assert out.endswith("  ABI: 'x86_64'\n\nend\n")


HEADER = _native.abi_sizeof("ur_lmu_header")
LEAK = _native.abi_sizeof("ur_lmu_leak")


def _decode(out: bytes) -> tuple[dict, list[dict], bytes]:
    head = _native.abi_decode("ur_lmu_header", out)
    end = HEADER + head["entries"] * LEAK
    return head, _native.abi_decode_array("ur_lmu_leak", out[HEADER:end]), out[end:]


def test_records_then_the_text_report_bytes():
    leaks = [_leak(b"hello\0\xff", 20), _leak(None, 0)]
    # A name and a path of the kind a line-based reader would split.
    leaks[1].backtrace = [
        Frame(0x2000, "/opt/app at 1/lib x.so", 5, "ns::f(int (*)(char)) const", 2)
    ]
    out = format_records(_report(leaks))
    head, records, text = _decode(out)
    assert head == {
        "magic": _native.LMU_MAGIC,
        "version": 1,
        "leak_size": LEAK,
        "leak_count": 7,
        "leak_bytes": 736,
        "allocation_count": 20,
        "allocation_bytes": 2000,
        "entries": 2,
        "text_length": len(text),
    }
    first = records[0]
    assert first["begin"] == 0x7B2C4E8010 and first["size"] == 24
    assert [first[k] for k in ("referenced_count", "referenced_size", "total_size")] == [
        2,
        160,
        736,
    ]
    assert first["contents_length"] == 7 and first["contents"][:7] == b"hello\0\xff"
    assert first["num_frames"] == 16 and first["frames"] == [0x1000 + i for i in range(16)]
    assert records[1]["contents_length"] == 0 and records[1]["frames"][0] == 0x2000
    assert text == format_report(_report(leaks)).encode()
    assert "ns::f(int (*)(char)) const+2" in text.decode()


def test_records_wiring():
    assert "lmu-records" in FORMATS
    out = render(_report([]), "lmu-records")
    assert isinstance(out, bytes)
    head, records, text = _decode(out)
    assert head["entries"] == 0 and records == []
    assert text.endswith(b"  ABI: 'x86_64'\n\n")
