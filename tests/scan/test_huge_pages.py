"""A heap on transparent huge pages (`unreachable-cli run --huge-pages`) scans the same."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from unreachable import _native
from unreachable.capture.target import open_target
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


def _kernel_at_least(major: int, minor: int) -> bool:
    release = os.uname().release.split("-")[0].split(".")
    return (int(release[0]), int(release[1])) >= (major, minor)


def _wait_huge_kb(pid: int, at_least: int, timeout_s: float = 30.0) -> int:
    deadline = time.monotonic() + timeout_s
    while (kb := anon_huge_kb(pid)) < at_least and time.monotonic() < deadline:
        time.sleep(0.1)
    return kb


def test_arena_heaps_are_collapsed_onto_huge_pages(targets):
    """glibc leaves its per-thread arenas on 4 KiB pages even with the tunable;
    the shim's helper collapses them (native/shim/huge_arenas.c)."""
    if why := huge_pages_unavailable():
        pytest.skip(why)
    if not _kernel_at_least(6, 1):
        pytest.skip("MADV_COLLAPSE needs Linux 6.1")
    plain = targets.start(PROGRAMS / "arena_heap.c")
    target = targets.start(PROGRAMS / "arena_heap.c", env={"GLIBC_TUNABLES": HUGE_PAGE_TUNABLE})
    # 4 arenas of 8 MiB: at least 3 whole 2 MiB ranges each.
    assert _wait_huge_kb(target.pid, 4 * 3 * 2048) >= 4 * 3 * 2048
    # Without the tunable nothing is collapsed (the kernel's mode is madvise).
    assert anon_huge_kb(plain.pid) < 2048
    for snapshot in ("fork", "stopped"):
        report = scan(target.pid, ScanOptions(snapshot=snapshot))
        assert (report.leak_count, report.leak_bytes) == (
            target.int("leak_count"),
            target.int("leak_bytes"),
        )
    assert target.alive() and target.tracer() == 0


def anon_kb(pid: int) -> int:
    with open(f"/proc/{pid}/smaps_rollup") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("Anonymous:"))


def test_memory_glibc_returns_is_not_collapsed_back(targets):
    """Each range is collapsed once: what glibc trims from an arena stays
    returned to the kernel while the helper keeps looking for new ranges."""
    if why := huge_pages_unavailable():
        pytest.skip(why)
    if not _kernel_at_least(6, 1):
        pytest.skip("MADV_COLLAPSE needs Linux 6.1")
    target = targets.start(PROGRAMS / "arena_trim.c", env={"GLIBC_TUNABLES": HUGE_PAGE_TUNABLE})
    assert _wait_huge_kb(target.pid, 4 * 3 * 2048) >= 4 * 3 * 2048
    full = anon_kb(target.pid)
    target.send("free")
    assert target.read_line() == "FREED"
    trimmed = anon_kb(target.pid)
    assert trimmed < full - 16 * 1024, (full, trimmed)
    time.sleep(2.5)  # two of the helper's one-second looks
    assert anon_kb(target.pid) <= trimmed + 2048, (full, trimmed)


def test_what_glibc_trimmed_before_the_helper_looked_is_not_collapsed(targets):
    """The helper collapses only the part of an arena heap glibc uses
    (heap_info.size): the rest of the read-write mapping was trimmed with
    MADV_DONTNEED or is not used yet, and a collapse would fill it."""
    if why := huge_pages_unavailable():
        pytest.skip(why)
    if not _kernel_at_least(6, 1):
        pytest.skip("MADV_COLLAPSE needs Linux 6.1")
    target = targets.start(
        PROGRAMS / "arena_trim.c", "at-once", env={"GLIBC_TUNABLES": HUGE_PAGE_TUNABLE}
    )
    trimmed = anon_kb(target.pid)
    time.sleep(2.5)  # two of the helper's one-second looks
    assert anon_kb(target.pid) <= trimmed + 2048, trimmed


def _shim_region_huge(pid: int) -> tuple[int, bool]:
    """AnonHugePages (kB) of the shim's region, and whether it is advised so."""
    header = _native.read_registry(pid, open_target(pid).shim.descriptor_addr, False, False)
    regions = header["regions"]
    inside, huge_kb, advised = False, 0, False
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            word, *rest = line.split()
            if "-" in word and not word.endswith(":"):
                start = int(word.split("-")[0], 16)
                inside = any(lo <= start < hi for lo, hi in regions)
            elif inside and word == "AnonHugePages:":
                huge_kb += int(rest[0])
            elif inside and word == "VmFlags:":
                advised |= "hg" in rest
    return huge_kb, advised


def test_the_shims_own_memory_is_on_huge_pages_too(targets):
    """Its size maps take up to an eighth of the heap's span: on 4 KiB pages
    their page tables would lengthen a fork snapshot's pause."""
    if why := huge_pages_unavailable():
        pytest.skip(why)
    plain = targets.start(PROGRAMS / "big_heap.c")
    target = targets.start(PROGRAMS / "big_heap.c", env={"GLIBC_TUNABLES": HUGE_PAGE_TUNABLE})
    assert _shim_region_huge(plain.pid) == (0, False)
    huge_kb, advised = _shim_region_huge(target.pid)
    assert advised and huge_kb >= 2048, huge_kb
