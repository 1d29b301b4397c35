"""Each scenario program is scanned while it waits; totals must be exact."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.cbuild import build
from tests.support.tracking import copy_unsupported
from unreachable.capture.target import open_target
from unreachable.heapdump.live import heap_dump
from unreachable.process.maps import read_maps
from unreachable.process.memory import present_ranges
from unreachable.scan import ScanOptions, scan

PROGRAMS = Path(__file__).parent / "programs"


def check_exact(target, **kw):
    report = scan(target.pid, ScanOptions(**kw))
    assert (report.leak_count, report.leak_bytes) == (
        target.int("leak_count"),
        target.int("leak_bytes"),
    ), [(hex(e.address), e.size) for e in report.leaks]
    return report


# Each prints what it leaked (leak_count, leak_bytes) and is scanned in every mode.
SCENARIOS = [
    "globals.c",
    "main_stack.c",
    "thread_stack.c",
    "registers.c",
    "tls.c",
    "mmap_page.c",
    "interior.c",
    "past_end.c",
    "alloc_funcs.c",
    "big_block.c",
    "registry_homes.c",
    "exited_thread.c",
    "sparse.c",
    "sparse_block.c",
    "usable_slack.c",
    "atexit_block.c",
    "merged_pools.c",
    "jit_code.c",
    "epoll_data.c",
    "timer_value.c",
    "signal_stack.c",
    "coroutine_stack.c",
    "user_namespace.c",
    "queued_signal.c",
    "main_thread_exited.c",
    "in_flight.c",
    "merged_stacks.c",
    "unmapped_stack.c",
]


@pytest.mark.parametrize(
    "program",
    SCENARIOS,
)
@pytest.mark.parametrize(
    ("snapshot", "sweep"),
    [
        ("fork", "child"),
        ("fork", "scanner"),
        pytest.param(
            "copy",
            "auto",
            marks=pytest.mark.skipif(bool(copy_unsupported()), reason=copy_unsupported()),
        ),
        ("stopped", "auto"),
        pytest.param(
            "concurrent",
            "auto",
            marks=pytest.mark.skipif(bool(copy_unsupported()), reason=copy_unsupported()),
        ),
    ],
)
def test_scenario(targets, program, snapshot, sweep):
    target = targets.start(PROGRAMS / program)
    report = check_exact(target, snapshot=snapshot, sweep=sweep)
    assert report.snapshot == snapshot
    assert report.sweep == (sweep if snapshot == "fork" else "scanner")
    assert target.alive() and target.tracer() == 0


def test_a_process_whose_main_thread_exited(targets):
    """Its /proc/PID/status says State Z, its other threads run: the report
    names the process, and a heap dump reads it too."""
    target = targets.start(PROGRAMS / "main_thread_exited.c")
    with open(f"/proc/{target.pid}/status") as f:
        assert "State:\tZ" in f.read()
    report = check_exact(target)
    assert report.pid == target.pid and report.threads == 9
    assert heap_dump(target.pid).allocation_count >= 2
    assert target.alive() and target.tracer() == 0


def test_untouched_pages_of_a_reservation_are_not_scanned(targets):
    target = targets.start(PROGRAMS / "sparse.c")
    modes = ["fork", "stopped"] + ([] if copy_unsupported() else ["copy"])
    for snapshot in modes:
        report = check_exact(target, snapshot=snapshot)
        # The copy knows absence by 1 MiB chunk, the kernel's pagemap by page.
        assert report.roots["untouched"] >= target.int("reserved") - (4 << 20), report.roots
        assert report.bytes_scanned < 64 << 20, report.bytes_scanned


def test_untouched_pages_of_a_block_are_not_read(targets):
    """A block's pages that were never touched are zero: a fork's snapshot
    child, the mark over a stopped scan's or a copy's frozen cache, and the
    marks over the live target (a copy-on-write copy, the concurrent mark)
    read only the pages the block has."""
    target = targets.start(PROGRAMS / "sparse_block.c")
    modes = [("fork", "child"), ("stopped", "auto")]
    modes += [] if copy_unsupported() else [("copy", "auto"), ("concurrent", "auto")]
    for snapshot, sweep in modes:
        report = check_exact(target, snapshot=snapshot, sweep=sweep)
        assert report.sweep == (sweep if snapshot == "fork" else "scanner")
        assert report.bytes_scanned < target.int("big") // 8, (snapshot, report.bytes_scanned)


def _helper_asleep(pid: int) -> None:
    """Until the shim's helper has run to its first wait: the stack it
    touches on the way is the program's own growth, not the scanner's."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        tid = open_target(pid).header.helper_tid
        if tid:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "S":
                    return
        time.sleep(0.005)
    raise AssertionError("the shim's helper never went to sleep")


@pytest.mark.parametrize("snapshot", ["stopped", "fork"])
def test_the_scan_maps_nothing_into_the_target(targets, snapshot):
    """Reading an untouched page of private anonymous memory through /proc
    maps the zero page there: the scanner reads only the pages that exist."""
    target = targets.start(PROGRAMS / "sparse.c")
    _helper_asleep(target.pid)

    def present_bytes() -> int:
        spans = [(m.start, m.end) for m in read_maps(target.pid) if m.demand_zero]
        return sum(e - b for b, e in present_ranges(target.pid, spans))

    before = present_bytes()
    check_exact(target, snapshot=snapshot, sweep="scanner")
    assert present_bytes() == before


@pytest.mark.parametrize("snapshot", ["stopped", "copy", "concurrent", "fork"])
def test_the_scan_faults_no_file_page_into_the_target(targets, snapshot):
    """Code and .rodata are never roots, but the 1 MiB chunks read around a
    program's globals take in the pages below them: read through /proc, a
    page of the file the target never touched was mapped into it (a server
    under haproxy's workload grew from 7 to 13 MB of RSS at one scan)."""
    if snapshot in ("copy", "concurrent") and copy_unsupported():
        pytest.skip(copy_unsupported())
    target = targets.start(PROGRAMS / "rodata_table.c")
    _helper_asleep(target.pid)
    table = (target.int("table"), target.int("table") + target.int("table_bytes"))
    before = present_ranges(target.pid, [table])
    check_exact(target, snapshot=snapshot, sweep="scanner")
    assert present_ranges(target.pid, [table]) == before


@pytest.mark.parametrize("snapshot", ["stopped", "copy", "fork"])
def test_marking_team_over_a_frozen_copy(targets, snapshot):
    """Once the scanner's copy no longer changes (stopped mode after the
    release, a copy snapshot, a frozen snapshot child swept from outside), it
    marks with a team: the same verdicts."""
    if snapshot == "copy" and copy_unsupported():
        pytest.skip(copy_unsupported())
    target = targets.start(PROGRAMS / "graph.c")
    one = check_exact(target, snapshot=snapshot, sweep="scanner", mark_threads=1)
    team = check_exact(target, snapshot=snapshot, sweep="scanner", mark_threads=4)
    key = sorted((e.size, e.referenced_count, e.referenced_size) for e in one.leaks)
    assert key == sorted((e.size, e.referenced_count, e.referenced_size) for e in team.leaks)
    assert one.sweep == team.sweep == "scanner"
    assert (one.mark_threads, team.mark_threads) == (1, 4)


def test_marking_team_over_a_target_stopped_in_place(targets):
    """Past the 64 MiB a stopped scan copies, the target stays stopped for
    the whole sweep, read in place: it no longer changes either, so a team
    marks it, each thread through a cache of its own (native/scanner/sweep.c):
    the same verdicts."""
    target = targets.start(PROGRAMS / "big_heap.c", "96")
    one = check_exact(target, snapshot="stopped", mark_threads=1)
    team = check_exact(target, snapshot="stopped", mark_threads=2)
    assert (one.mark_threads, team.mark_threads) == (1, 2)


def test_dlopen_globals_and_tls(targets):
    lib = build(PROGRAMS / "dlopen_lib.c", shared=True)
    target = targets.start(PROGRAMS / "dlopen_main.c", str(lib))
    check_exact(target)


def test_cxx_containers_cookies_second_base(targets):
    target = targets.start(PROGRAMS / "cxx.cpp", cxx=True)
    check_exact(target)


def test_graph_folding(targets):
    target = targets.start(PROGRAMS / "graph.c")
    report = check_exact(target)
    # Without backtraces the two members of the cycle, of one size, are one
    # entry (fold/types.py).
    assert len(report.leaks) == target.int("entries") - 1
    by_total = sorted(
        (e.size, e.referenced_count, e.referenced_size, e.similar_count, e.similar_referenced_size)
        for e in report.leaks
    )
    assert by_total == sorted(
        [
            (40, 2, 48 + 56, 0, 0),  # chain head -> 2 below
            (132, 4, 4 * 132, 0, 0),  # tree root -> 4 below
            (232, 0, 0, 1, 0),  # the members of the 2-cycle, each a leak of its own
            (332, 0, 0, 0, 0),  # self-pointing block: its own pointer does not count
        ]
    )


def test_many_allocations(targets):
    target = targets.start(PROGRAMS / "many.c", "200000", "100000")
    report = check_exact(target)
    assert report.allocation_count >= 300000


def test_churning_threads_invent_no_leak(targets):
    target = targets.start(PROGRAMS / "churn.c")
    for snapshot, sweep in [("fork", "child"), ("fork", "scanner"), ("stopped", "auto")] * 4:
        check_exact(target, snapshot=snapshot, sweep=sweep)
    assert target.alive()


def test_limit_and_contents(targets):
    target = targets.start(PROGRAMS / "many.c", "100", "50")
    report = scan(target.pid, ScanOptions(limit=7, contents=True))
    assert report.leak_count == 50
    assert len(report.leaks) == 7
    assert all(e.contents is not None and len(e.contents) == min(e.size, 32) for e in report.leaks)
    totals = [e.total_size for e in report.leaks]
    assert totals == sorted(totals, reverse=True)


def test_registry_comes_in_address_order(targets):
    from unreachable.allocations.registry import read_registry
    from unreachable.capture.descriptor import locate_shim
    from unreachable.process.maps import read_maps

    target = targets.start(PROGRAMS / "many.c", "5000", "5000")
    shim = locate_shim(target.pid, read_maps(target.pid))
    registry = read_registry(target.pid, shim.descriptor_addr)
    begins = [registry.begin(i) for i in range(registry.count)]
    assert registry.count >= 10000
    assert begins == sorted(set(begins))


def test_registry_of_a_process_that_exited_is_not_found_not_unshimmed(targets):
    """A process that has exited, or exits while its registry is read (then
    it reads as zeros), is gone (a scan takes a new snapshot, or says it
    exited), not one without the shim. The zombie is the case a test can
    hold still; both take the same path."""
    from unreachable.allocations.registry import read_registry
    from unreachable.capture.descriptor import locate_shim
    from unreachable.errors import TargetNotFound
    from unreachable.process.maps import read_maps

    target = targets.start(PROGRAMS / "many.c", "100", "100")
    shim = locate_shim(target.pid, read_maps(target.pid))
    os.kill(target.pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while target.state() != "Z" and time.monotonic() < deadline:
        time.sleep(0.01)
    assert target.state() == "Z"  # not reaped: its /proc entry stays
    with pytest.raises(TargetNotFound, match="exited"):
        read_registry(target.pid, shim.descriptor_addr)


def test_stopped_mode_lets_the_target_go_before_marking(targets):
    """`stopped` pauses the target while the memory the walk needs is read,
    not for the mark and fold (native/scanner/sweep.c, release=)."""
    target = targets.start(PROGRAMS / "many.c", "20000", "5000")
    seen: dict[str, object] = {}

    def progress(stage: str) -> None:
        if stage in ("allocations", "marked"):
            seen[stage] = (target.tracer(), target.state())

    report = scan(target.pid, ScanOptions(snapshot="stopped"), progress=progress)
    assert (report.leak_count, report.leak_bytes) == (
        target.int("leak_count"),
        target.int("leak_bytes"),
    )
    assert report.snapshot == "stopped"
    assert seen["allocations"][0] != 0  # still held while its memory is read
    assert seen["marked"][0] == 0 and seen["marked"][1] != "t"  # running during the mark


def _jemalloc() -> str | None:
    """libjemalloc.so.2 as the dynamic linker finds it (Debian's libjemalloc2)."""
    out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        if line.strip().startswith("libjemalloc.so.2 ") and "=>" in line:
            return line.split("=>")[1].strip()
    return None


def test_a_program_linked_with_jemalloc(targets):
    """Its mallocx family and C++ operators resolve to the shim: it runs,
    and the C++ objects it drops are leaks like any other."""
    lib = _jemalloc()
    if lib is None:
        pytest.skip("libjemalloc2 is not installed (scripts/install.sh --test installs it)")
    target = targets.start(PROGRAMS / "jemalloc_linked.cpp", cxx=True, ldflags=[lib])
    report = check_exact(target)
    # Without backtraces, leaks of one size and type are one entry (fold/types.py).
    sizes = sorted(e.size for e in report.leaks for _ in range(1 + e.similar_count))
    assert sizes == [48, 48, 48, 200, 300], sizes


@pytest.mark.parametrize("snapshot", ["fork", "copy", "stopped"])
def test_a_program_linked_with_an_allocator_defining_glibcs_names(targets, snapshot):
    """tcmalloc and mimalloc define __libc_malloc and the rest too: the
    shim's blocks still come from glibc, whose chunk header free reads, so
    a freed block leaves the registry and is no leak."""
    lib = build(PROGRAMS / "libc_names_lib.c", shared=True)
    target = targets.start(PROGRAMS / "libc_names.c", ldflags=[str(lib)])
    check_exact(target, snapshot=snapshot)
    assert target.int("foreign_blocks") == 0


def test_malloc_usable_size_is_the_requested_size(targets):
    target = targets.start(PROGRAMS / "usable_slack.c")
    assert target.int("usable") == 9


def test_coroutine_stack_mapped_alone(targets):
    """A coroutine's stack big enough for glibc to map it as a chunk of its
    own: SP in an mmap'ed block instead of the brk heap."""
    target = targets.start(PROGRAMS / "coroutine_stack.c", "256")
    for snapshot in ("fork", "stopped"):
        check_exact(target, snapshot=snapshot)
