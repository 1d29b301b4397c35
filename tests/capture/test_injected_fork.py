"""The copy-on-write snapshot of a process without the shim: a clone()
injected into one of its stopped threads by the stopper process
(unreachable/scan/glibc_fork.py, native/stopper/stopper.c).

The verdicts are the whole copy's; the target is left as it was found: the
thread the clone ran in goes on with its own registers inside the system
call it was stopped in (a read, a sleep, a futex wait), the target's own
SIGCHLD handler and waitpid(-1) see nothing, no child or zombie remains,
and no tracer holds it, even when the scanner is killed at any step. A
seccomp filter that could refuse the clone or the reap gets the whole
copy, and the report says why."""

from __future__ import annotations

import errno
import json
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.cbuild import build
from tests.support.targets import Target, TargetFactory, wait_untraced
from unreachable import _native
from unreachable.process.maps import read_maps
from unreachable.process.memory import present_ranges
from unreachable.scan import ScanOptions, scan

PROGRAMS = Path(__file__).parent / "programs"
SCAN_PROGRAMS = Path(__file__).parent.parent / "scan" / "programs"
PROGRAM = PROGRAMS / "injected_target.c"
CLI = [sys.executable, "-m", "unreachable.cli.main"]
# x86-64 system call numbers the main thread waits in, by variant.
WAITS_IN = {"read": "0", "nanosleep": "230", "futex": "202", "errno-clone": "0", "kill-wait4": "0"}
RESTART_SYSCALL = "219"
ORIG_RAX = 15  # user_regs_struct's word
RESULTS = {
    "read": "RESULT r=5 errno=0 data=hello",
    "futex": "RESULT r=0 errno=0 word=1",
}

pytestmark = pytest.mark.skipif(os.uname().machine != "x86_64", reason="x86-64 injection")


def _syscall(pid: int) -> str:
    with open(f"/proc/{pid}/syscall") as f:
        return f.read().split()[0]


def _wait_for(what: str, ok: object, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not ok():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.005)


def _start(targets: TargetFactory, how: str) -> Target:
    target = targets.start(PROGRAM, how, preload=False, wait_helper=False)
    _wait_for("the main thread never blocked", lambda: _syscall(target.pid) == WAITS_IN[how])
    return target


def _registers(pid: int) -> dict[int, bytes]:
    """Every thread's registers, read by a stop of our own."""
    session = _native.Session(pid)
    try:
        return {tid: regs for tid, _sp, regs, _x in session.stop()}
    finally:
        session.close()


def _children(pid: int) -> list[str]:
    """The target's children (every thread's), zombies included."""
    out = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/children") as f:
            out += f.read().split()
    return out


def _wait_back_in(target: Target, how: str) -> None:
    back_in = RESTART_SYSCALL if how == "nanosleep" else WAITS_IN[how]
    _wait_for("the thread never went back to its call", lambda: _syscall(target.pid) == back_in)


def _left_as_found(target: Target, how: str, before: bytes) -> None:
    """Untraced, no child, the main thread's registers as before, its call
    finishing as it would have, and nothing seen by its SIGCHLD handler."""
    assert target.alive() and target.tracer() == 0
    assert _children(target.pid) == []
    # Released, a thread stopped in a restartable call shows the call's
    # number in rax and its pc on the syscall instruction until it runs
    # again, as after any stop: read its registers once it is back inside.
    _wait_back_in(target, how)
    after = _registers(target.pid)[target.pid]
    if how == "nanosleep":
        # Restarted by the kernel's restart_syscall, as any stop leaves it
        # (our own stop's release included: running until it is back).
        _wait_back_in(target, how)
        words_before, words_after = (
            struct.iter_unpack("<Q", before),
            struct.iter_unpack("<Q", after),
        )
        diff = [i for i, (a, b) in enumerate(zip(words_before, words_after, strict=True)) if a != b]
        assert diff in ([], [ORIG_RAX])
    else:
        assert after == before
    # That stop interrupted the call too: a futex word changed before the
    # wait is back would make it return EAGAIN, as after any stop.
    _wait_back_in(target, how)
    target.send("write")
    target.send("wake")
    result = target.read_line()
    if how == "nanosleep":
        fields = dict(kv.split("=") for kv in result.split()[1:])
        assert (fields["r"], fields["errno"]) == ("0", "0")
        assert int(fields["elapsed_ms"]) >= 12000  # slept its whole time, not cut short
    else:
        assert result == RESULTS.get(how, RESULTS["read"])
    if how != "kill-wait4":  # its own waitpid would be killed by its filter
        target.send("status")
        assert target.read_line() == f"STATUS sigchld=0 wait=-1 errno={errno.ECHILD}"


@pytest.mark.parametrize("how", ["read", "nanosleep", "futex"])
def test_the_thread_goes_on_in_its_system_call(targets, how):
    target = _start(targets, how)
    before = _registers(target.pid)[target.pid]
    report = scan(target.pid, ScanOptions())
    assert (report.snapshot, report.snapshot_note) == ("fork", "")
    assert report.allocations == "glibc heap"
    whole = scan(target.pid, ScanOptions(snapshot="stopped"))
    assert whole.snapshot == "stopped"
    assert (report.leak_count, report.leak_bytes) == (whole.leak_count, whole.leak_bytes)
    assert report.leak_count == target.int("leak_count")
    if how == "nanosleep":
        # Still asleep: the scans interrupted the sleep, which goes on.
        _wait_back_in(target, how)
    _left_as_found(target, how, before)


@pytest.mark.parametrize(
    ("how", "why"),
    [
        ("errno-clone", "the injected clone failed: Operation not permitted"),
        ("kill-wait4", "its seccomp filter does not provably allow wait4()"),
    ],
)
def test_a_seccomp_filter_in_the_way_gets_the_whole_copy(targets, how, why):
    target = _start(targets, how)
    before = _registers(target.pid)[target.pid]
    report = scan(target.pid, ScanOptions())
    assert report.snapshot == "stopped"
    assert report.snapshot_note == f"no copy-on-write snapshot: {why}"
    assert report.leak_count == target.int("leak_count")
    _left_as_found(target, how, before)


@pytest.mark.parametrize(
    ("variant", "snapshot"), [("kill-clone", "stopped"), ("errno-uname", "fork")]
)
def test_a_filter_that_would_kill_on_clone_is_never_given_one(targets, variant, snapshot):
    target = targets.start(SCAN_PROGRAMS / "seccomp_filter.c", variant, preload=False)
    report = scan(target.pid, ScanOptions())
    assert report.snapshot == snapshot, report.snapshot_note
    assert ("seccomp" in report.snapshot_note) == (snapshot == "stopped")
    assert report.leak_count == target.int("leak_count")
    assert target.alive() and target.tracer() == 0 and _children(target.pid) == []


@pytest.mark.parametrize("step", ["stopped", "sigaltstack", "clone", "child", "wait4"])
def test_a_scanner_killed_at_any_step_leaves_the_target_as_found(targets, step):
    """stopped: the target stopped by the stopper; sigaltstack, clone and
    wait4: a thread holding the injected call's registers; child: the
    frozen child alive, the target running."""
    target = _start(targets, "read")
    before = _registers(target.pid)[target.pid]
    env = dict(os.environ, UNREACHABLE_TEST_KILL_AT=step)
    run = subprocess.run([*CLI, "scan", str(target.pid)], env=env, capture_output=True, timeout=120)
    assert run.returncode == -9, run.stderr.decode()
    # The stopper puts everything back by itself once the scanner is gone.
    wait_untraced(target)
    _left_as_found(target, "read", before)


@pytest.mark.parametrize("step", ["stopped", "sigaltstack", "copied"])
def test_a_scanner_killed_in_the_whole_copys_stop_leaves_the_target_as_found(targets, step):
    """--snapshot stopped: the stopper holds the one stop the copy is made
    in. stopped: the target stopped, nothing asked yet; sigaltstack: a
    thread holding the injected query's registers; copied: the memory read
    from the scanner, the pin gate open."""
    target = _start(targets, "read")
    before = _registers(target.pid)[target.pid]
    env = dict(os.environ, UNREACHABLE_TEST_KILL_AT=step)
    command = [*CLI, "scan", "--snapshot", "stopped", str(target.pid)]
    run = subprocess.run(command, env=env, capture_output=True, timeout=120)
    assert run.returncode == -9, run.stderr.decode()
    wait_untraced(target)
    _left_as_found(target, "read", before)


@pytest.mark.parametrize(
    "program",
    ["globals.c", "arena_heap.c", "graph.c", "big_block.c", "epoll_data.c", "queued_signal.c"],
)
def test_verdicts_are_the_whole_copys(targets, program):
    target = targets.start(SCAN_PROGRAMS / program, preload=False, wait_helper=False)
    forked = scan(target.pid, ScanOptions())
    whole = scan(target.pid, ScanOptions(snapshot="stopped"))
    assert (forked.snapshot, whole.snapshot) == ("fork", "stopped")
    assert (forked.leak_count, forked.leak_bytes) == (whole.leak_count, whole.leak_bytes)
    assert sorted(e.address for e in forked.leaks) == sorted(e.address for e in whole.leaks)
    assert forked.leak_count == target.int("leak_count")
    assert _children(target.pid) == [] and target.tracer() == 0


def test_a_scanner_under_a_filter_of_its_own_still_forks_a_target_without_one(targets):
    """The target's filters cannot be read by a scanner under a seccomp
    filter (a hardened service's); a target with none needs no reading."""
    target = _start(targets, "read")
    wrapper = build(PROGRAMS / "under_filter.c")
    run = subprocess.run(
        [str(wrapper), *CLI, "scan", str(target.pid), "--json"], capture_output=True, text=True
    )
    assert run.returncode == 1, run.stderr
    report = json.loads(run.stdout)
    assert (report["snapshot"], report["snapshot_note"]) == ("fork", "")
    assert report["leak_count"] == target.int("leak_count")
    wait_untraced(target)
    assert _children(target.pid) == []


def test_a_sparse_reservation_is_not_read_page_by_page(targets):
    """64 GiB reserved, two pages used: the walk looks for chunks mmap'ed
    alone only on the child's pages that exist. Reading every page start
    through /proc took minutes and mapped the zero page into each, which
    the mark then read as present: all 64 GiB."""
    target = targets.start(SCAN_PROGRAMS / "sparse.c", preload=False, wait_helper=False)
    report = scan(target.pid, ScanOptions())
    assert report.snapshot == "fork" and report.leak_count == target.int("leak_count")
    assert report.bytes_scanned < target.int("reserved") // 1024
    assert report.roots["untouched"] > target.int("reserved") // 2


def test_the_search_for_a_syscall_faults_no_code_into_the_target(targets):
    """The clone is run from a syscall instruction of the target's libc,
    looked for among the pages it maps already: reading all of libc's text
    through /proc faulted into the target every page of it the program had
    never run (744 KiB more RSS in haproxy at one scan)."""
    target = _start(targets, "read")
    libc = next(m for m in read_maps(target.pid) if m.executable and "/libc.so" in m.path)
    before = present_ranges(target.pid, [(libc.start, libc.end)])
    report = scan(target.pid, ScanOptions())
    assert (report.snapshot, report.snapshot_note) == ("fork", "")
    assert present_ranges(target.pid, [(libc.start, libc.end)]) == before
