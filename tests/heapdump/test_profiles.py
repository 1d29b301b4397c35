"""--format collapsed and --format pprof for scan reports and heap dumps."""

from __future__ import annotations

from tests.heapdump.profile_proto import decode
from tests.support.reports import make_report
from tests.symbolize import program
from unreachable.heapdump.dump_format import write_dump
from unreachable.heapdump.viewer import render_dump
from unreachable.model.report import LeakEntry, ScanReport
from unreachable.report.collapsed import report_to_collapsed
from unreachable.report.pprof import report_to_pprof
from unreachable.symbolize.frames import Frame

LIB = "/usr/lib/libfoo.so"


def _leak(address, size, similar, similar_size, frames):
    return LeakEntry(
        address=address,
        size=size,
        referenced_count=0,
        referenced_size=0,
        similar_count=similar,
        similar_size=similar_size,
        similar_referenced_count=0,
        similar_referenced_size=0,
        total_size=size + similar_size,
        backtrace=frames,
    )


def _report() -> ScanReport:
    malloc = Frame(0x7F0000001010, "/lib/libc.so.6", 0x1010, "malloc", 16)
    bar = Frame(0x7F000001E5C4, LIB, 0x1E5C4, "Foo::Bar()", 132, "foo.cc", 42)
    op = Frame(0x7F000001F000, LIB, 0x1F000, "Box<int>::operator+(Box<int> const&) const", 8)
    main = Frame(0x5500000011D1, "/usr/bin/app", 0x11D1, "main", 33, "app.c", 7)
    unknown = Frame(0x5500000099AA, "/usr/bin/app", 0x99AA, "", 0)
    leaks = [
        _leak(0x1000, 100, 2, 200, [malloc, bar, main]),
        _leak(0x2000, 48, 0, 0, [malloc, op, unknown, main]),
        _leak(0x3000, 7, 0, 0, []),
    ]
    return make_report(
        leaks,
        pid=42,
        command="app --serve",
        leak_count=5,
        leak_bytes=355,
        allocation_count=10,
        allocation_bytes=1000,
        pause_ms=1.0,
        scan_ms=2.0,
    )


def test_report_to_collapsed():
    assert report_to_collapsed(_report()).splitlines() == [
        "[no backtrace] 7",
        "main;Foo::Bar();malloc 300",
        "main;app+0x99aa;Box<int>::operator+(Box<int> const&) const;malloc 48",
    ]
    assert "main;Foo::Bar();malloc 3" in report_to_collapsed(_report(), "count")


def test_report_to_pprof_reads_back():
    p = decode(report_to_pprof(_report()))
    s = list(p.string_table)
    assert s[0] == ""
    assert [(s[t.type], s[t.unit]) for t in p.sample_type] == [
        ("leak_objects", "count"),
        ("leak_space", "bytes"),
    ]
    assert s[p.default_sample_type] == "leak_space"
    assert [list(x.value) for x in p.sample] == [[3, 300], [1, 48], [1, 7]]
    locations = {loc.id: loc for loc in p.location}
    functions = {f.id: f for f in p.function}
    mappings = {m.id: m for m in p.mapping}

    def where(loc_id):
        loc = locations[loc_id]
        names = [(s[functions[ln.function_id].name], ln.line) for ln in loc.line]
        return s[mappings[loc.mapping_id].filename], loc.address, names

    assert [where(i) for i in p.sample[0].location_id] == [
        ("/lib/libc.so.6", 0x7F0000001010, [("malloc", 0)]),
        (LIB, 0x7F000001E5C4, [("Foo::Bar()", 42)]),
        ("/usr/bin/app", 0x5500000011D1, [("main", 7)]),
    ]
    assert where(p.sample[1].location_id[2]) == ("/usr/bin/app", 0x5500000099AA, [])
    assert list(p.sample[2].location_id) == []
    bar = next(f for f in functions.values() if s[f.name] == "Foo::Bar()")
    assert s[bar.filename] == "foo.cc"
    lib = next(m for m in mappings.values() if s[m.filename] == LIB)
    assert lib.has_functions and lib.has_line_numbers
    assert lib.memory_start <= 0x7F000001E5C4 < lib.memory_limit
    # The allocation size of single leaks as pprof's "bytes" label.
    label = p.sample[1].label[0]
    assert s[label.key] == "bytes" and label.num == 48
    assert any("app --serve" in s[c] for c in p.comment)


def test_heap_dump_to_pprof(tmp_path):
    run = program.run(leaks=4)
    path = tmp_path / "heap.txt"
    with open(path, "w") as f:
        write_dump([(size, 1, pcs) for size, pcs in run.all], run.maps_text, 32, "fp", f)
    data = render_dump(str(path), "pprof")
    assert isinstance(data, bytes)
    p = decode(data)
    s = list(p.string_table)
    assert [s[t.type] for t in p.sample_type] == ["inuse_objects", "inuse_space"]
    assert sum(x.value[1] for x in p.sample) == sum(size for size, _ in run.all)
    functions = {f.id: s[f.name] for f in p.function}
    locations = {loc.id: loc for loc in p.location}
    leaky = next(x for x in p.sample if list(x.value) == [4, 400])
    names = [functions[locations[i].line[0].function_id] for i in leaky.location_id[:3]]
    assert names == ["tracked_alloc", "leaky()", "main"]
    exe = next(m for m in p.mapping if s[m.filename] == str(program.program()))
    assert s[exe.build_id] and exe.has_line_numbers
    assert s[leaky.label[0].key] == "bytes" and leaky.label[0].num == 100
