"""`unreachable-cli scan --format lmu`: what native/shim/memunreachable.c parses."""

from __future__ import annotations

from tests.support.reports import folded_leak, make_report
from unreachable.cli.scan import FORMATS, render
from unreachable.report.lmu import format_lmu
from unreachable.report.model import LeakEntry, ScanReport
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
