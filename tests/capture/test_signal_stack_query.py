"""Every thread's alternate signal stack asked at once, without the shim
(native/scanner/signal_stack_query.c, docs/pause.md "Asking the signal
stacks"): the stopper gives each stopped thread an injected
sigaltstack(), lets them all run into it side by side, then all back.

Held with every query in flight (the stopper's fault point), each of the
65 threads sits inside sigaltstack() at the same moment; the scanner
then gone (its end of the pipe closed), the stopper finishes the calls
and lets the process go as it found it: each thread back in its own call
with its own registers, the words below each SP as they were, each
thread's stack still installed."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.targets import Target, wait_untraced
from unreachable import _native
from unreachable.allocations.glibc_heap import find_libc
from unreachable.capture.stopper import KILL_AT, stopper_path
from unreachable.process.maps import read_maps
from unreachable.scan import ScanOptions, scan
from unreachable.scan.syscall_site import syscall_instruction

PROGRAM = Path(__file__).parent.parent / "scan" / "programs" / "dropped_signal_stacks.c"
THREADS = 64  # each with its own malloc'ed stack only the kernel holds
SIGALTSTACK = "131"  # x86-64 system call numbers
ASLEEP_IN = {"0", "34", "219", "230"}  # read, pause, restart_syscall, clock_nanosleep
BELOW = 512  # bytes read below each thread's SP: the red zone and the query's words

pytestmark = pytest.mark.skipif(os.uname().machine != "x86_64", reason="x86-64 injection")


def _calls(pid: int) -> dict[int, list[str]]:
    """Each thread's /proc/PID/task/TID/syscall fields."""
    calls = {}
    for tid in map(int, os.listdir(f"/proc/{pid}/task")):
        with open(f"/proc/{pid}/task/{tid}/syscall") as f:
            calls[tid] = f.read().split()
    return calls


def _asleep(pid: int) -> dict[int, list[str]]:
    """The calls once every thread is back asleep in one of its own."""
    deadline = time.monotonic() + 20
    while True:
        calls = _calls(pid)
        if all(c[0] in ASLEEP_IN for c in calls.values()):
            return calls
        assert time.monotonic() < deadline, calls
        time.sleep(0.005)


def _state(pid: int) -> tuple[dict[int, bytes], dict[int, bytes]]:
    """Every thread's registers, read by a stop of our own, and the bytes
    below its SP, once all are back asleep."""
    _asleep(pid)
    session = _native.Session(pid)
    try:
        regs = {tid: r for tid, _sp, r, _x in session.stop()}
    finally:
        session.close()
    below = {}
    with open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
        for tid, fields in _asleep(pid).items():
            mem.seek(int(fields[-2], 16) - BELOW)
            below[tid] = mem.read(BELOW)
    return regs, below


def _held_stopper(target: Target) -> subprocess.Popen[bytes]:
    """A stopper that has stopped the target and holds it with every
    thread's query in place ("hold sigaltstack")."""
    mappings = read_maps(target.pid)
    ip = syscall_instruction(target.pid, find_libc(target.pid, mappings), mappings)
    assert ip
    proc = subprocess.Popen(
        [stopper_path(), str(target.pid), f"{ip:x}"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=dict(os.environ, **{KILL_AT: "sigaltstack"}),
        process_group=0,
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(b"stop 0 0 0 0 1\n")
    proc.stdin.flush()
    assert proc.stdout.readline() == b"hold sigaltstack\n"
    return proc


def test_every_thread_is_asked_at_once_and_left_as_found_when_the_scanner_goes(targets):
    target = targets.start(
        PROGRAM, preload=False, wait_helper=False, cflags=[f"-DTHREADS={THREADS}"]
    )
    _state(target.pid)  # a first stop: sleeps interrupted once go on in restart_syscall
    regs, below = _state(target.pid)
    proc = _held_stopper(target)
    try:
        inside = {tid: c[0] for tid, c in _calls(target.pid).items()}
        assert len(inside) == THREADS + 1
        # Asked one after another, at most one thread was ever inside.
        assert set(inside.values()) == {SIGALTSTACK}, inside
    finally:
        # The scanner gone: the stopper finishes the calls and lets go.
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.close()
        proc.stdout.close()
        proc.wait(timeout=60)
    wait_untraced(target)
    assert _state(target.pid) == (regs, below)
    target.send("signal")
    assert target.read_line() == f"on_altstack={THREADS}"
    report = scan(target.pid, ScanOptions(snapshot="stopped"))
    assert report.leak_count == target.int("leak_count") == 1
    assert report.roots["signal stacks"] == 8 * THREADS
    assert target.alive() and target.tracer() == 0
