"""A new allocation source is one module and one line: the scan's stages
(unreachable/scan/) sweep against whatever registry the plan's source
serves. tests/scan/fixed_blocks.py serves two of a real process's three
blocks; the scan then knows of those two only."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from tests.scan.fixed_blocks import fixed_blocks
from unreachable.allocations.source import SOURCES
from unreachable.scan import ScanOptions, scan
from unreachable.scan.facts import gather_facts
from unreachable.scan.plan import plan
from unreachable.scan.run import run_plans

PROGRAMS = Path(__file__).parent / "programs"


def test_a_test_only_source_plugs_in_with_one_line(targets, monkeypatch):
    target = targets.start(PROGRAMS / "fixed_blocks.c")
    held, lost = target.int("held"), target.int("lost")
    monkeypatch.setitem(SOURCES, "fixed blocks", fixed_blocks([(held, 100), (lost, 300)]))
    options = ScanOptions(snapshot="stopped")
    facts = gather_facts(target.pid, options)
    # The one line in the plan: its allocations come from the new source.
    plans = [replace(p, allocations="fixed blocks") for p in plan(facts, options)]
    report = run_plans(facts, plans, options)
    assert report.allocations == "fixed blocks"
    assert (report.allocation_count, report.allocation_bytes) == (2, 400)
    assert (report.leak_count, report.leak_bytes) == (1, 300)
    assert [e.address for e in report.leaks] == [lost]
    # The shim's own registry knows the third block too.
    shim = scan(target.pid, options)
    assert (shim.leak_count, shim.leak_bytes) == (2, 800)
    assert target.alive() and target.tracer() == 0
