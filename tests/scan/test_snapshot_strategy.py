"""A new snapshot strategy is one module and one line: the scan's stages
after capture (unreachable/scan/run.py) read whatever the plan's strategy
hands them. tests/scan/whole_copy_under_shim.py copies a stopped process
under the shim whole; the scan then finds what a stopped scan finds."""

from __future__ import annotations

from pathlib import Path

from tests.scan.whole_copy_under_shim import NAME, whole_copy_under_shim
from unreachable.scan import ScanOptions, scan
from unreachable.scan.capture import CAPTURES
from unreachable.scan.facts import gather_facts
from unreachable.scan.plan import Plan
from unreachable.scan.run import run_plans

PROGRAMS = Path(__file__).parent / "programs"


def test_a_test_only_strategy_plugs_in_with_one_line(targets, monkeypatch):
    target = targets.start(PROGRAMS / "fixed_blocks.c")
    lost, unlisted = target.int("lost"), target.int("unlisted")
    monkeypatch.setitem(CAPTURES, NAME, whole_copy_under_shim)
    options = ScanOptions(snapshot="stopped")
    facts = gather_facts(target.pid, options)
    # The one line in the plan: its snapshot is the new strategy's.
    report = run_plans(facts, [Plan(NAME)], options)  # type: ignore[arg-type]
    assert report.snapshot == NAME and report.sweep == "scanner"
    assert (report.leak_count, report.leak_bytes) == (2, 800)
    assert sorted(e.address for e in report.leaks) == sorted([lost, unlisted])
    assert report.pause_ms > 0 and report.roots
    stopped = scan(target.pid, options)
    assert (stopped.leak_count, stopped.allocation_count) == (2, report.allocation_count)
    assert target.alive() and target.tracer() == 0
