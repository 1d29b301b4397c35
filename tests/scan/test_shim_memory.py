"""The shim's own memory follows the heap down: the pages of its size maps
that cover no live block are given back once the heap shrinks
(native/shim/give_back.c), and scans stay exact before, after, and once the
heap grows into that memory again."""

from __future__ import annotations

from pathlib import Path

from tests.scanner.procs import wait_until
from tests.support.shim_memory import shim_resident_bytes
from unreachable.scan import ScanOptions, scan

PROGRAMS = Path(__file__).parent / "programs"
MIB = 1 << 20


def _exact(target) -> None:
    report = scan(target.pid, ScanOptions())
    assert (report.leak_count, report.leak_bytes) == (
        target.int("leak_count"),
        target.int("leak_bytes"),
    )


def _next_phase(target, phase: str) -> None:
    target.send("next")
    line = target.read_line()
    target.info = dict(kv.split("=", 1) for kv in line.split()[1:])
    assert target.info["phase"] == phase, line


def test_the_size_maps_pages_are_given_back_when_the_heap_shrinks(targets):
    target = targets.start(PROGRAMS / "heap_shrink.c")
    full = shim_resident_bytes(target.pid)
    # 64 MiB in 200-byte blocks: level 0 of the maps over the whole span, a
    # sixteenth of it.
    assert full >= 3 * MIB, full
    _exact(target)
    _next_phase(target, "shrunk")
    # One block in 1024 is left: about one map page in three holds an entry.
    wait_until(
        lambda: shim_resident_bytes(target.pid) < full // 2,
        timeout=30,
        what="the shim giving its maps' pages back",
    )
    _exact(target)
    _next_phase(target, "grown")
    _exact(target)
    assert target.alive() and target.tracer() == 0
