"""A heap on transparent huge pages (`unreachable-cli run --huge-pages`) scans the same."""

from __future__ import annotations

from pathlib import Path

import pytest

from unreachable.scan import ScanOptions, scan
from unreachable.shim_env import HUGE_PAGE_TUNABLE, huge_pages_unavailable

PROGRAMS = Path(__file__).parent / "programs"


def anon_huge_kb(pid: int) -> int:
    with open(f"/proc/{pid}/smaps_rollup") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("AnonHugePages:"))


@pytest.mark.parametrize("snapshot", ["fork", "stopped"])
def test_scan_of_a_huge_page_heap_is_exact(targets, snapshot):
    target = targets.start(PROGRAMS / "big_heap.c", env={"GLIBC_TUNABLES": HUGE_PAGE_TUNABLE})
    if why := huge_pages_unavailable():
        pytest.skip(why)
    # Without this the test would pass on 4 KiB pages and prove nothing.
    assert anon_huge_kb(target.pid) >= 2048
    report = scan(target.pid, ScanOptions(snapshot=snapshot))
    assert (report.leak_count, report.leak_bytes) == (
        target.int("leak_count"),
        target.int("leak_bytes"),
    )
    assert report.snapshot == snapshot
    assert target.alive() and target.tracer() == 0
