"""A malloc'ed alternate signal stack only the kernel holds is in use
without the shim too, in every snapshot mode: each stopped thread is asked
with an injected sigaltstack() (native/scanner/signal_stack_query.c), as
the shim records each call (docs/glibc-heap.md "Signal stacks").

dropped_signal_stacks.c gives four threads a 13,504-byte stack each, as
Erlang's VM does, drops every pointer to them, and leaks one 40-byte block.
After the scan a signal still arrives on each thread's alternate stack, and
the sleeping threads' interrupted calls go on."""

from __future__ import annotations

from pathlib import Path

import pytest

from unreachable.scan import ScanOptions, scan

PROGRAMS = Path(__file__).parent / "programs"
HEAP_SLACK = 24  # a chunk's usable bytes beyond the request, at most


def _leaks(report) -> list[tuple[str, int]]:
    return [(hex(e.address), e.size) for e in report.leaks]


# The default is a copy-on-write child made by an injected clone; "stopped"
# copies the whole heap while the process is stopped.
@pytest.mark.parametrize(("snapshot", "made"), [("auto", "fork"), ("stopped", "stopped")])
def test_dropped_signal_stacks_are_not_leaks_without_the_shim(targets, snapshot, made):
    target = targets.start(PROGRAMS / "dropped_signal_stacks.c", preload=False, wait_helper=False)
    for _ in range(2):  # a second scan finds the stacks the first put back
        report = scan(target.pid, ScanOptions(snapshot=snapshot))
        assert report.allocations == "glibc heap" and report.snapshot == made
        assert report.leak_count == target.int("leak_count") == 1, _leaks(report)
        assert 40 <= report.leak_bytes <= 40 + HEAP_SLACK
        assert "signal stacks" not in report.snapshot_note, report.snapshot_note
        assert target.alive() and target.tracer() == 0
    target.send("signal")
    assert target.read_line() == "on_altstack=4"
    target.send("signal")
    assert target.read_line() == "on_altstack=4"
    assert target.state() in "SR"


@pytest.mark.parametrize(("snapshot", "made"), [("auto", "fork"), ("stopped", "stopped")])
def test_a_filter_refusing_sigaltstack_is_said_and_the_process_left_alone(targets, snapshot, made):
    """A filter that kills on sigaltstack(): the threads are not asked, the
    stacks are reported as before, and the note says why."""
    target = targets.start(
        PROGRAMS / "dropped_signal_stacks.c", "refuse", preload=False, wait_helper=False
    )
    report = scan(target.pid, ScanOptions(snapshot=snapshot))
    assert report.snapshot == made
    assert "signal stacks of 5 thread(s) were not read" in report.snapshot_note
    assert "seccomp filter does not provably allow sigaltstack()" in report.snapshot_note
    assert report.leak_count == 1 + 4, _leaks(report)
    assert target.alive() and target.tracer() == 0
