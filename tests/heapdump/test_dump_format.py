"""Heap dump files: v1.0/v1.1/v1.2 samples from the seeds, and the v1.2 writer."""

from __future__ import annotations

import io

import pytest

from tests.symbolize import program
from unreachable.heapdump.dump_format import (
    BtInfo,
    DumpFormatError,
    parse_dump,
    read_dump,
    write_dump,
)
from unreachable.heapdump.viewer import render_dump

MAPS = "7fe9181000-7fe91a2000 rw-p 00000000 00:00 0" + " " * 30 + "/system/lib/libc.so\n"

V10 = f"""Android Native Heap Dump v1.0

Total memory: 900
Allocation records: 2
Backtrace size: 16

z 0  sz      400  num    1  bt 0000a230 0000b500
z 1  sz      500  num    3  bt 0000b000 0000c000
MAPS
{MAPS}END
"""

V12 = f"""Android Native Heap Dump v1.2

Build fingerprint: 'google/taimen/taimen:8.1.0/OPM2.171026.006.C1/4769658:user/release-keys'

Total memory: 1900
Allocation records: 2
Backtrace size: 16

z 0  sz      400  num    1  bt a2a0 b510
  bt_info {{"/system/libc.so" 2a0 "abort" 24}} {{"/system/libutils.so" 510 "" 0}}
z 0  sz      500  num    3  bt b000 c000
MAPS
{MAPS}END
"""


def test_v10_counts_every_record_once():
    dump = parse_dump(V10)
    assert dump.version == "1.0" and not dump.num_field_valid
    assert [(r.zygote, r.size, r.num_allocations, r.pcs) for r in dump.records] == [
        (0, 400, 1, (0xA230, 0xB500)),
        (1, 500, 1, (0xB000, 0xC000)),  # "num 3", but v1.0's num is unreliable
    ]
    assert dump.total_memory == 900 and dump.backtrace_size == 16
    assert dump.fingerprint is None
    assert dump.mappings[0].path == "/system/lib/libc.so"


def test_v11_counts_are_accurate():
    dump = parse_dump(V10.replace("v1.0", "v1.1"))
    assert dump.version == "1.1" and dump.num_field_valid
    assert [r.num_allocations for r in dump.records] == [1, 3]
    assert dump.computed_total == 400 + 1500


def test_v12_fingerprint_unpadded_frames_and_bt_info():
    dump = parse_dump(V12)
    assert dump.version == "1.2"
    assert dump.fingerprint == (
        "google/taimen/taimen:8.1.0/OPM2.171026.006.C1/4769658:user/release-keys"
    )
    first, second = dump.records
    assert first.pcs == (0xA2A0, 0xB510)
    assert first.bt_info == [
        BtInfo("/system/libc.so", 0x2A0, "abort", 0x24),
        BtInfo("/system/libutils.so", 0x510, "", 0),
    ]
    assert second.bt_info is None and second.num_allocations == 3


def test_not_a_dump():
    with pytest.raises(DumpFormatError):
        parse_dump("hello\nworld\n")
    with pytest.raises(DumpFormatError):
        parse_dump("Android Native Heap Dump v1.2\n\nz 0 sz x num 1 bt\n")


def test_writer_matches_bionic_layout():
    out = io.StringIO()
    records = [
        (10, 1, (0xA000, 0xB000)),
        (50, 1, (0xA100, 0xB200)),
        (5, 1, (0xA300, 0xB300, 0, 0)),  # trailing zero frames are dropped
        (5, 2, ()),  # no backtrace: after the ones with one
        (5, 1, (0xA300, 0xB300)),  # same size and backtrace: merged
        (5, 1, (0xC000, 0xD000, 0xE000)),  # deeper backtraces first
    ]
    write_dump(records, "MAP_DATA\n", 4, "", out)
    assert out.getvalue() == (
        "Android Native Heap Dump v1.2\n"
        "\n"
        "Build fingerprint: ''\n"
        "\n"
        "Total memory: 85\n"
        "Allocation records: 5\n"
        "Backtrace size: 4\n"
        "\n"
        "z 0  sz       50  num    1  bt a100 b200\n"
        "z 0  sz       10  num    1  bt a000 b000\n"
        "z 0  sz        5  num    1  bt c000 d000 e000\n"
        "z 0  sz        5  num    2  bt a300 b300\n"
        "z 0  sz        5  num    2  bt\n"
        "MAPS\n"
        "MAP_DATA\n"
        "END\n"
    )
    back = parse_dump(out.getvalue())
    assert back.total_memory == back.computed_total == 85
    assert [(r.size, r.num_allocations, r.pcs) for r in back.records][2:] == [
        (5, 1, (0xC000, 0xD000, 0xE000)),
        (5, 2, (0xA300, 0xB300)),
        (5, 2, ()),
    ]


def test_writer_round_trip_with_bt_info(tmp_path):
    run = program.run()
    records = [(size, 1, pcs) for size, pcs in run.all]
    path = tmp_path / "heap.txt"
    with open(path, "w") as f:
        write_dump(records, run.maps_text, 32, "debian/12", f, bt_info=True)
    dump = read_dump(str(path))
    assert dump.version == "1.2" and dump.fingerprint == "debian/12"
    assert dump.backtrace_size == 32 and dump.maps_text == run.maps_text
    assert sum(r.num_allocations for r in dump.records) == len(records)
    assert dump.total_memory == sum(size for size, _ in run.all)
    leaky = next(r for r in dump.records if r.size == 100)
    assert leaky.num_allocations == 3  # three identical leaky() calls
    assert leaky.bt_info is not None and len(leaky.bt_info) == len(leaky.pcs)
    assert [i.function for i in leaky.bt_info[:3]] == ["tracked_alloc", "leaky()", "main"]
    assert leaky.bt_info[0].map == str(program.program())


def test_viewer_groups_by_backtrace_largest_first(tmp_path):
    run = program.run(leaks=5)
    path = tmp_path / "heap.txt"
    with open(path, "w") as f:
        write_dump([(size, 1, pcs) for size, pcs in run.all], run.maps_text, 32, "fp", f)
    text = render_dump(str(path))
    assert isinstance(text, str)
    assert text.startswith("Android Native Heap Dump v1.2\nBuild fingerprint: 'fp'\n")
    blocks = text.split("\n\n")[1:]
    assert blocks[0].startswith("  500 bytes in 5 allocations (")
    assert "(leaky()+" in blocks[0] and "frames.cpp:" in blocks[0]
    assert "#00  pc " in blocks[0] and "(tracked_alloc+" in blocks[0]


def test_viewer_on_seed_samples(tmp_path):
    """Files of another machine: frames keep their map; bt_info names the functions."""
    for name, text in (("v10", V10), ("v12", V12)):
        path = tmp_path / name
        path.write_text(text)
        out = render_dump(str(path))
        assert isinstance(out, str)
        if name == "v10":
            assert "each record counts as 1" in out
            assert "  500 bytes in 1 allocation " in out
        else:
            assert "  1500 bytes in 3 allocations " in out
            assert "/system/libc.so (abort+36)" in out


def test_viewer_formats(tmp_path):
    path = tmp_path / "v12"
    path.write_text(V12)
    collapsed = render_dump(str(path), "collapsed")
    assert isinstance(collapsed, str) and collapsed.splitlines()
    assert any(line.endswith(" 1500") for line in collapsed.splitlines())
    pprof = render_dump(str(path), "pprof")
    assert isinstance(pprof, bytes) and pprof[:2] == b"\x1f\x8b"
    with pytest.raises(ValueError):
        render_dump(str(path), "svg")
