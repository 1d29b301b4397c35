"""The shim's stack table grows a segment at a time as stacks are interned
(abi.h ur_stack_table), instead of reserving room for 2^20 stacks at start
(266 MiB of address space under backtrace=16). A program that lowers its
RLIMIT_AS after its start (vsftpd's session child: 200 MiB) then still has
its address space; the scanner reads stacks from every segment; and where
the table cannot grow, its stacks are lost, not the program's memory, and
the report says how many."""

from __future__ import annotations

from pathlib import Path

from unreachable.scan import ScanOptions, scan

PROGRAM = Path(__file__).parent / "programs" / "stack_paths.c"
OPTIONS = "backtrace=16"


def _paths(report) -> set[tuple[str, ...]]:
    """Each leak's f0/f1 frames, innermost first: its bits."""
    return {
        tuple(f.function for f in leak.backtrace if f.function in ("f0", "f1"))
        for leak in report.leaks
    }


def test_stacks_in_every_segment_are_read_back(targets):
    """16,384 stacks fill the table's first four segments; each leak's
    frames spell its own path, none twice."""
    depth = 14
    target = targets.start(PROGRAM, str(depth), options=OPTIONS)
    assert target.int("stacks") > 1 << depth and target.int("dropped") == 0
    report = scan(target.pid, ScanOptions(limit=1 << 16))
    assert report.leak_count == 1 << depth
    paths = _paths(report)
    assert len(paths) == 1 << depth
    assert {len(p) for p in paths} == {depth}
    assert target.alive() and target.tracer() == 0


def test_a_program_that_lowers_its_address_space_limit_later_keeps_its_memory(targets):
    """Under 200 MiB set after the start, as vsftpd does, a 64 MiB mmap and
    a thread: the whole table taken at start left no room for them
    ("500 OOPS: mmap")."""
    target = targets.start(PROGRAM, "12", "200", options=OPTIONS)
    assert target.int("failed") == 0 and target.int("dropped") == 0
    report = scan(target.pid, ScanOptions(limit=1 << 16))
    assert report.leak_count == 1 << 12
    assert len(_paths(report)) == 1 << 12


def test_a_table_that_cannot_grow_loses_stacks_not_memory(targets):
    """The address space left under the limit holds the program's heap but
    not the table's next segment: the program allocates on, the stacks
    past the table's room are counted as dropped, their leaks are found
    without frames, and the report says why."""
    depth = 15
    target = targets.start(PROGRAM, str(depth), "200", "1024", options=OPTIONS)
    assert target.int("failed") == 0
    dropped = target.int("dropped")
    assert dropped > 0
    report = scan(target.pid, ScanOptions(limit=1 << 16))
    assert report.leak_count == 1 << depth
    bare = sum(1 for leak in report.leaks if not leak.backtrace)
    assert 0 < bare <= dropped
    assert f"{dropped} allocations have no backtrace" in report.symbol_note
    assert target.alive() and target.tracer() == 0
