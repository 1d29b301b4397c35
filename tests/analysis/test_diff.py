"""unreachable-cli diff: what grew between two heap dumps or two scan results."""

from __future__ import annotations

import json

import pytest

from tests.symbolize import program
from unreachable.analysis.diff import (
    diff_snapshots,
    diff_to_collapsed,
    load_snapshot,
    snapshot_from_json,
)
from unreachable.cli.main import main
from unreachable.heapdump.dump_format import write_dump
from unreachable.model.report import LeakEntry, ScanReport
from unreachable.report.json_report import report_to_dict
from unreachable.symbolize.frames import Frame


def _dump(path, records, maps_text):
    with open(path, "w") as f:
        write_dump([(size, 1, pcs) for size, pcs in records], maps_text, 32, "fp", f)
    return str(path)


def _functions(row):
    return [f.function for f in row.frames[:3]]


def test_two_dumps_of_one_process_before_and_after_a_leak(tmp_path):
    """Seed 004's workflow: snapshot, exercise, snapshot, diff."""
    run = program.run(leaks=3)
    old = _dump(tmp_path / "0.txt", run.before, run.maps_text)
    new = _dump(tmp_path / "1.txt", run.all, run.maps_text)
    rows = diff_snapshots(load_snapshot(old), load_snapshot(new))
    top = rows[0]
    assert _functions(top) == ["tracked_alloc", "leaky()", "main"]
    assert (top.before_count, top.before_bytes, top.after_count, top.after_bytes) == (0, 0, 3, 300)
    assert (top.delta_count, top.delta_bytes) == (3, 300)
    # The two baseline() calls after the snapshot come from new call sites in main.
    assert sorted((r.delta_count, r.delta_bytes) for r in rows[1:]) == [(1, 64), (1, 64)]
    assert all(_functions(r)[1] == "baseline()" for r in rows[1:])
    # Everything allocated before the snapshot is unchanged, so not listed...
    everything = diff_snapshots(load_snapshot(old), load_snapshot(new), include_all=True)
    assert len(everything) == len(rows) + len({pcs for _, pcs in run.before})
    assert all(r.delta_bytes == 0 for r in everything[len(rows) :])


def test_two_runs_match_despite_aslr(tmp_path):
    """Frames are keyed by (map, relative pc): different processes of one binary match."""
    one, four = program.run(leaks=1), program.run(leaks=4)
    old = load_snapshot(_dump(tmp_path / "a.txt", one.all, one.maps_text))
    new = load_snapshot(_dump(tmp_path / "b.txt", four.all, four.maps_text))
    rows = diff_snapshots(old, new)
    assert len(rows) == 1
    assert _functions(rows[0]) == ["tracked_alloc", "leaky()", "main"]
    assert (rows[0].before_count, rows[0].after_count, rows[0].delta_bytes) == (1, 4, 300)
    assert diff_to_collapsed(rows).endswith("main;leaky();tracked_alloc 300\n")


def _scan(leaks):
    frames = {
        "a": [Frame(0x7F01, "/lib/liba.so", 0x101, "grow()", 5, "a.c", 3)],
        "b": [Frame(0x7F02, "/lib/liba.so", 0x202, "steady()", 5)],
    }
    entries = [
        LeakEntry(0x1000 + i, size, 0, 0, n, n * size, 0, 0, size * (n + 1), None, frames[k])
        for i, (k, size, n) in enumerate(leaks)
    ]
    report = ScanReport(1, "app", 0, 0, 0, 0, 0.0, 0.0, "fork", 1, entries)
    return report_to_dict(report)


def test_two_scan_results():
    old = snapshot_from_json(_scan([("a", 16, 1), ("b", 8, 0)]), "old")
    new = snapshot_from_json(_scan([("a", 16, 9), ("b", 8, 0)]), "new")
    assert old.kind == "scan"
    (row,) = diff_snapshots(old, new)
    assert row.frames[0].function == "grow()"
    assert (row.before_count, row.before_bytes, row.after_count, row.after_bytes) == (
        2,
        32,
        10,
        160,
    )


def test_cli(tmp_path, capsys):
    run = program.run(leaks=2)
    old = _dump(tmp_path / "0.txt", run.before, run.maps_text)
    new = _dump(tmp_path / "1.txt", run.all, run.maps_text)
    assert main(["diff", old, new]) == 1
    text = capsys.readouterr().out
    assert "Change: +328 bytes, +4 allocations; 3 backtraces grew" in text
    assert "  +200 bytes in +2 allocations (before 0 bytes in 0, after 200 bytes in 2)" in text
    assert "(leaky()+" in text

    assert main(["diff", old, new, "--format", "json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["rows"][0]["delta_bytes"] == 200
    assert doc["rows"][0]["backtrace"][1]["function"] == "leaky()"
    assert doc["after"]["bytes"] - doc["before"]["bytes"] == 328

    assert main(["diff", old, new, "--format", "collapsed"]) == 1
    assert "main;leaky();tracked_alloc 200\n" in capsys.readouterr().out

    assert main(["diff", new, new]) == 0
    assert "0 backtraces grew" in capsys.readouterr().out

    scan = tmp_path / "scan.json"
    scan.write_text(json.dumps(_scan([("a", 16, 1)])))
    assert main(["diff", str(scan), str(scan)]) == 0
    capsys.readouterr()


@pytest.mark.parametrize("content", [None, "not a dump\n", '{"x": 1}'])
def test_cli_bad_input(tmp_path, capsys, content):
    path = tmp_path / "bad"
    if content is not None:
        path.write_text(content)
    assert main(["diff", str(path), str(path)]) == 2
    assert capsys.readouterr().err.startswith("unreachable-cli: error: ")
