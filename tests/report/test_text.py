from __future__ import annotations

from tests.support.reports import folded_leak, make_report
from unreachable.model.report import LeakEntry
from unreachable.report.text import format_report, format_summary
from unreachable.symbolize.frames import Frame


def _report(leaks):
    return make_report(leaks, leak_count=12, leak_bytes=736)


def test_matches_libmemunreachable_layout():
    leak = folded_leak(
        b"hello leak\0\0\x10\0\0\0" + b"\0" * 8,
        [Frame(0x7F001E5C4, "/system/lib64/libfoo.so", 0x1E5C4, "Foo::Bar()", 132)],
    )
    assert format_report(_report([leak])) == (
        "  736 bytes in 12 unreachable allocations\n"
        "  ABI: 'x86_64'\n"
        "\n"
        "  24 bytes unreachable at 7b2c4e8010\n"
        "   referencing 160 unreachable bytes in 2 allocations\n"
        "   and 72 similar unreachable bytes in 3 allocations\n"
        "   referencing 480 unreachable bytes in 6 allocations\n"
        "   contents:\n"
        "   7b2c4e8010: 68 65 6c 6c 6f 20 6c 65 61 6b 00 00 10 00 00 00 hello leak......\n"
        "   7b2c4e8020: 00 00 00 00 00 00 00 00                         ........\n"
        "          #00  pc 000000000001e5c4  /system/lib64/libfoo.so (Foo::Bar()+132)\n"
        "\n"
    )


def test_no_quirks_decimal_counts_and_unsigned_bytes():
    leak = LeakEntry(
        address=0x10,
        size=40,
        referenced_count=0,
        referenced_size=0,
        similar_count=0,
        similar_size=0,
        similar_referenced_count=0,
        similar_referenced_size=0,
        total_size=40,
        contents=bytes([0xAA] * 32),
    )
    text = format_report(_report([leak]))
    assert "   first 32 bytes of contents:\n" in text  # decimal, not "first 20"
    assert "aa aa" in text and "ffffffaa" not in text


def test_singular():
    leak = LeakEntry(0x10, 1, 1, 8, 1, 1, 0, 0, 10)
    text = format_report(_report([leak]))
    assert "in 1 allocation\n" in text


def test_summary_says_why_the_target_stayed_paused():
    forked = format_summary(make_report([]))
    assert forked.endswith("scan 3.0 ms)") and "stopped" not in forked
    why = "the target has a seccomp filter and reading it takes CAP_SYS_ADMIN"
    stopped = format_summary(make_report([], snapshot="stopped", snapshot_note=why))
    assert stopped.endswith(f"scan 3.0 ms; swept stopped: {why})")


def test_summary_gives_the_hold_beside_the_pause():
    held = format_summary(make_report([], pause_ms=41.5, hold_ms=1.25))
    assert "(pid 1, paused 41.50 ms (held 1.25 ms), scan 3.0 ms)" in held
    # a scan that never stopped its target has no hold to give
    assert "held" not in format_summary(make_report([], pause_ms=0.0))


def test_summary_says_why_the_child_did_not_sweep():
    why = "the target's memory cgroup had 20 MiB left, and sweeping in the snapshot child ..."
    line = format_summary(make_report([], sweep_note=why))
    assert line.endswith(f"scan 3.0 ms; swept from outside: {why})")
