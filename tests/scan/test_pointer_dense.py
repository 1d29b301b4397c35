"""Scans of heaps past the copy bound and the readers' caches (docs/pause.md,
"Bounding a stopped scan's pause"), dense in pointers and in random order
(pointer_dense.c: PowerDNS's caches' shape), in every mode that reads
through a chunk cache: a stopped scan swept in place (32 MiB), a
copy-on-write snapshot's and the concurrent mark's readers (8 MiB each).
With a few pointers a block the mark takes the reference graph; with more
than its budget it takes a partial graph and reads the blocks it left out
again in passes in address order, exactly either way. A list of such
blocks laid out at random, as deep as the heap, would take a pass per
link: a reader reaches its read bound and the scan ends with one line and
exit 2, the target released as found (tests/scanner/test_bounded_cache_mark.py
counts the bytes read)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from unreachable.report.schema import report_from_json
from unreachable.report.text import format_summary
from unreachable.scan import ScanOptions, scan

PROGRAM = Path(__file__).parent / "programs" / "pointer_dense.c"
CLI = [sys.executable, "-m", "unreachable.cli.main"]


def _status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return dict(line.split(":\t", 1) for line in lines if ":\t" in line)


def test_a_heap_of_five_pointers_a_block_is_swept_in_place(targets):
    # 1.5M blocks of 40 bytes: 72 MB, past the copy bound; 7.5M edges.
    target = targets.start(PROGRAM, "1500000", "5")
    report = scan(target.pid, ScanOptions(snapshot="stopped"))
    assert report.snapshot == "stopped"
    assert (report.leak_count, report.leak_bytes) == (
        target.int("leak_count"),
        target.int("leak_bytes"),
    )


@pytest.mark.parametrize("mode", ["stopped", "copy", "concurrent"])
def test_a_heap_over_every_graph_budget_is_marked_exactly(targets, mode):
    # 600,000 blocks of 128 bytes: 77 MB, 9.6M edges, over every budget.
    target = targets.start(PROGRAM, "600000", "16")
    report = scan(target.pid, ScanOptions(snapshot=mode))
    assert report.snapshot == mode, report.snapshot_note
    assert (report.leak_count, report.leak_bytes) == (
        target.int("leak_count"),
        target.int("leak_bytes"),
    )
    status = _status(target.pid)
    assert status["State"][0] in "SR" and status["TracerPid"] == "0"


def test_a_mark_that_would_reread_the_heap_ends_with_one_line(targets):
    # 300,000 dense blocks linked in random order over 77 MB.
    target = targets.start(PROGRAM, "600000", "16", "3", "chain")
    done = subprocess.run(
        [*CLI, "scan", "--snapshot", "stopped", str(target.pid)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 2, done.stdout
    assert done.stderr.count("\n") == 1
    assert "more than 4 times over" in done.stderr
    assert "--snapshot fork" in done.stderr
    status = _status(target.pid)
    assert status["State"][0] in "SR" and status["TracerPid"] == "0"
    # The scan it names works.
    report = scan(target.pid, ScanOptions(snapshot="fork"))
    assert report.leak_count == target.int("leak_count")


def test_auto_takes_the_next_snapshot_when_the_mark_would_reread_the_heap(targets):
    """auto with a pause budget no plan meets tries the copy first (the
    shortest pause expected); its mark reaches the read bound, and the scan
    goes on with a fork, whose child reads its own memory, and says why."""
    target = targets.start(PROGRAM, "600000", "16", "3", "chain")
    report = scan(target.pid, ScanOptions(max_pause_ms=0.001))
    assert report.snapshot == "fork", report.snapshot_note
    assert "more than 4 times over" in report.snapshot_note, report.snapshot_note
    assert report.leak_count == target.int("leak_count")
    status = _status(target.pid)
    assert status["State"][0] in "SR" and status["TracerPid"] == "0"


def _json_scan(pid: int) -> dict:
    done = subprocess.run(
        [*CLI, "scan", "--snapshot", "stopped", "--json", str(pid)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 1, done.stderr
    return json.loads(done.stdout)


def test_the_report_counts_the_marks_passes_and_reads(targets):
    """A heap over every graph budget is read again in passes: the JSON
    report says how many and what the readers loaded, and the one-line
    summary says so; an ordinary heap's report has no pass and no word."""
    dense = targets.start(PROGRAM, "600000", "16")
    doc = _json_scan(dense.pid)
    assert doc["leak_count"] == dense.int("leak_count")
    assert doc["mark_passes"] > 0, doc["mark_passes"]
    # Blocks left out of the graph are read again: more than the heap once.
    assert doc["mark_bytes_read"] > doc["allocation_bytes"]
    summary = format_summary(report_from_json(doc))
    assert f"mark: {doc['mark_passes']} pass" in summary, summary
    plain = targets.start(PROGRAM, "20000", "2")
    doc = _json_scan(plain.pid)
    assert doc["leak_count"] == plain.int("leak_count")
    assert doc["mark_passes"] == 0
    assert doc["mark_bytes_read"] >= doc["allocation_bytes"] > 0
    assert "mark:" not in format_summary(report_from_json(doc))
