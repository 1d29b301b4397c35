"""A malloc'ed alternate signal stack only the kernel holds is in use
without the shim too, in every snapshot mode: each stopped thread is asked
with an injected sigaltstack() (native/scanner/signal_stack_query.c), as
the shim records each call (docs/glibc-heap.md "Signal stacks").

dropped_signal_stacks.c gives four threads a 13,504-byte stack each, as
Erlang's VM does, drops every pointer to them, and leaks one 40-byte block.
After the scan a signal still arrives on each thread's alternate stack, and
the sleeping threads' interrupted calls go on."""

from __future__ import annotations

import os
import time
from itertools import pairwise
from pathlib import Path

import pytest

from unreachable.scan import ScanOptions, scan

PROGRAMS = Path(__file__).parent / "programs"
HEAP_SLACK = 24  # a chunk's usable bytes beyond the request, at most
BELOW = 512  # bytes read below each thread's SP: the red zone and the query's words


def _sps(pid: int) -> dict[int, int]:
    """Each thread's SP once every one sleeps in a call (/proc/PID/task/TID/syscall)."""
    for _ in range(500):
        sps = {}
        for tid in map(int, os.listdir(f"/proc/{pid}/task")):
            with open(f"/proc/{pid}/task/{tid}/syscall") as f:
                fields = f.read().split()
            if len(fields) == 9:
                sps[tid] = int(fields[7], 16)
        if len(sps) == len(os.listdir(f"/proc/{pid}/task")):
            return sps
        time.sleep(0.01)
    raise AssertionError("a thread never went to sleep")


def _below_sps(pid: int) -> dict[int, bytes]:
    """The bytes below each sleeping thread's SP."""
    found = {}
    with open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
        for tid, sp in _sps(pid).items():
            mem.seek(sp - BELOW)
            found[tid] = mem.read(BELOW)
    return found


def _leaks(report) -> list[tuple[str, int]]:
    return [(hex(e.address), e.size) for e in report.leaks]


# The default is a copy-on-write child made by an injected clone; "stopped"
# copies the whole heap while the process is stopped.
@pytest.mark.parametrize(("snapshot", "made"), [("auto", "fork"), ("stopped", "stopped")])
def test_dropped_signal_stacks_are_not_leaks_without_the_shim(targets, snapshot, made):
    target = targets.start(PROGRAMS / "dropped_signal_stacks.c", preload=False, wait_helper=False)
    before = _below_sps(target.pid)
    for _ in range(2):  # a second scan finds the stacks the first put back
        report = scan(target.pid, ScanOptions(snapshot=snapshot))
        assert report.allocations == "glibc heap" and report.snapshot == made
        assert report.leak_count == target.int("leak_count") == 1, _leaks(report)
        assert 40 <= report.leak_bytes <= 40 + HEAP_SLACK
        assert "signal stacks" not in report.snapshot_note, report.snapshot_note
        # The stopper's stop, timed as the scanner's own (docs/pause.md):
        # the hold leaves out the threads reaching the stop.
        assert 0 < report.hold_ms < report.pause_ms, (report.hold_ms, report.pause_ms)
        assert target.alive() and target.tracer() == 0
    # Asleep all along: the words the kernel answered in are put back.
    assert _below_sps(target.pid) == before
    target.send("signal")
    assert target.read_line() == "on_altstack=4"
    target.send("signal")
    assert target.read_line() == "on_altstack=4"
    assert target.state() in "SR"


@pytest.mark.parametrize(("snapshot", "made"), [("auto", "fork"), ("stopped", "stopped")])
def test_every_stack_is_found_when_many_threads_are_asked_at_once(targets, snapshot, made):
    """96 threads, each with a stack of its own kept nowhere else, all
    asked in one batch (tests/capture/test_signal_stack_query.py): each
    answer is its own thread's, each stack found, each word below an SP
    put back."""
    threads = 96
    target = targets.start(
        PROGRAMS / "dropped_signal_stacks.c",
        preload=False,
        wait_helper=False,
        cflags=[f"-DTHREADS={threads}"],
    )
    before = _below_sps(target.pid)
    for _ in range(3):
        report = scan(target.pid, ScanOptions(snapshot=snapshot))
        assert report.snapshot == made and report.snapshot_note == ""
        assert report.leak_count == target.int("leak_count") == 1, _leaks(report)
        assert report.roots["signal stacks"] == 8 * threads
        assert target.alive() and target.tracer() == 0
    assert _below_sps(target.pid) == before
    target.send("signal")
    assert target.read_line() == f"on_altstack={threads}"


@pytest.mark.parametrize(("snapshot", "made"), [("auto", "fork"), ("stopped", "stopped")])
def test_threads_stopped_on_one_stack_are_asked_one_after_the_other(targets, snapshot, made):
    """Two threads parked on one stack, so each one's answer would be
    written to the same place: asked at once, one stack was read twice and
    the other reported leaked (13,504 bytes)."""
    target = targets.start(PROGRAMS / "shared_slot_stacks.c", preload=False, wait_helper=False)
    sps = _sps(target.pid)
    del sps[target.pid]
    assert len(sps) == 2 and len(set(sps.values())) == 1, sps
    for _ in range(2):
        report = scan(target.pid, ScanOptions(snapshot=snapshot))
        assert report.snapshot == made and report.snapshot_note == ""
        assert report.leak_count == target.int("leak_count") == 1, _leaks(report)
        assert report.roots["signal stacks"] == 16
        assert target.alive() and target.tracer() == 0


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


def test_a_thread_switching_signal_stacks_is_asked_in_the_copys_own_stop(targets):
    """A thread that mallocs a new stack every ~0.3 ms, frees the old one
    and keeps no pointer to the new: the whole copy asks the stacks in the
    very stop it copies in, so the stack installed is the one asked. Asked
    in a stop of its own before the copy's, a switch in between had the
    new stack reported leaked (13,504 bytes)."""
    target = targets.start(PROGRAMS / "switching_signal_stacks.c", preload=False, wait_helper=False)
    switched = []
    for _ in range(10):
        report = scan(target.pid, ScanOptions(snapshot="stopped"))
        assert report.allocations == "glibc heap" and report.snapshot == "stopped"
        assert report.leak_count == target.int("leak_count") == 1, _leaks(report)
        assert 40 <= report.leak_bytes <= 40 + HEAP_SLACK
        assert target.alive() and target.tracer() == 0
        target.send("")
        switched.append(int(target.read_line().removeprefix("switches=")))
    # The thread went on switching between the scans.
    assert all(b > a for a, b in pairwise(switched))
