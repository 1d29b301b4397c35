"""Pointers the kernel holds as roots (unreachable/capture/kernel_held.py):
epoll registrations' data, read in the pause when there are few, around it
when there are many; POSIX timers' values; queued signals' values; bytes
queued in pipes and unix sockets (in_flight.py)."""

from __future__ import annotations

import json
import os
import select
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cbuild import build
from tests.support.tracking import copy_unsupported
from unreachable.capture.kernel_held import KernelHeld
from unreachable.capture.write_tracking import ended
from unreachable.scan import ScanOptions, scan

PROGRAMS = Path(__file__).parent.parent / "scan" / "programs"


@pytest.fixture
def pipes() -> Iterator[list[int]]:
    fds = [os.pipe() for _ in range(4)]
    yield [r for r, _ in fds]
    for r, w in fds:
        os.close(r)
        os.close(w)


def _fds_in(words: bytes) -> set[int]:
    # Python's epoll sets only data.fd, the low half of the 64-bit data.
    return {v & 0xFFFFFFFF for v in struct.unpack(f"<{len(words) // 8}Q", words)}


def test_read_in_the_pause_when_few(pipes):
    with select.epoll() as ep:
        for r in pipes[:3]:
            ep.register(r, select.EPOLLIN)
        regs = KernelHeld.before_stop(os.getpid())
        assert ep.fileno() in regs.fds and regs.count >= 3
        regs.read_in_pause()
        assert regs.in_pause is not None
        ep.unregister(pipes[0])
        ep.register(pipes[3], select.EPOLLIN)
        # Only the pause's view counts.
        found = _fds_in(regs.epoll_words())
        assert set(pipes[:3]) <= found and pipes[3] not in found


def test_read_around_the_pause_when_many(pipes):
    with select.epoll() as ep:
        for r in pipes[:3]:
            ep.register(r, select.EPOLLIN)
        regs = KernelHeld.before_stop(os.getpid())
        regs.read_in_pause(limit=2)  # more than that: not read in the pause
        assert regs.in_pause is None
        ep.unregister(pipes[0])
        ep.register(pipes[3], select.EPOLLIN)
        # Gone since the first read, new before the last: both count.
        assert set(pipes) <= _fds_in(regs.epoll_words())


@pytest.mark.parametrize(
    ("program", "kind", "words"),
    [
        ("epoll_data.c", "epoll data", 2),  # two registrations
        ("timer_value.c", "timer values", 1),
        # both queues: the process's (sigqueue) and a thread's (pthread_sigqueue)
        ("queued_signal.c", "signal values", 2),
        # a pipe, a pipe full to capacity (2), a pointer at an odd offset
        ("in_flight.c", "pipe data", 4),
        # a stream socketpair, a datagram one (2)
        ("in_flight.c", "socket data", 3),
    ],
)
def test_a_scan_counts_them_as_roots(targets, program, kind, words):
    target = targets.start(PROGRAMS / program)
    for snapshot in ("fork", "stopped"):
        report = scan(target.pid, ScanOptions(snapshot=snapshot))
        assert (report.leak_count, report.leak_bytes) == (1, 24)
        assert report.roots[kind] == 8 * words
    if program == "queued_signal.c":
        # Still queued, blocked as the program left them.
        status = Path(f"/proc/{target.pid}/status").read_text()
        fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
        assert int(fields["ShdPnd"], 16) and int(fields["SigPnd"], 16)


def _own_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_queued_bytes_are_left_as_they_were(targets):
    """Read in every snapshot mode, nothing consumed: the program then reads
    back exactly what it wrote, and the scanner keeps no pipe or duplicate."""
    target = targets.start(PROGRAMS / "in_flight.c")
    modes = ["fork", "stopped"] + ([] if copy_unsupported() else ["copy"])
    before = _own_fds()
    for snapshot in modes:
        report = scan(target.pid, ScanOptions(snapshot=snapshot))
        assert (report.leak_count, report.leak_bytes) == (1, 24), snapshot
    ended(target.pid)  # the copy's end, which scan() leaves running beside its caller
    assert _own_fds() == before
    target.send("read")
    assert target.read_line() == "INTACT"


def test_a_program_reading_its_queues_during_the_scan(targets):
    target = targets.start(PROGRAMS / "in_flight.c")
    scanner = subprocess.Popen(
        [sys.executable, "-m", "unreachable.cli.main", "scan", str(target.pid)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    target.send("read")  # whenever it runs: before, in or after the pause
    assert target.read_line() == "INTACT"
    _, err = scanner.communicate(timeout=120)
    assert scanner.returncode in (0, 1), err


def test_a_scanner_that_may_not_call_pidfd_getfd(targets):
    """Under systemd's @system-service filter pidfd_getfd kills the caller:
    the scan reads the pipes (through /proc) and leaves the sockets."""
    target = targets.start(PROGRAMS / "in_flight.c")
    launcher = build(Path(__file__).parent / "programs" / "no_getfd.c")
    res = subprocess.run(
        [str(launcher), sys.executable, "-m", "unreachable.cli.main", "scan", str(target.pid)]
        + ["--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 1, (res.returncode, res.stderr)
    report = json.loads(res.stdout)
    # The three blocks only a socket holds are reported, the pipes' are not.
    assert (report["leak_count"], report["leak_bytes"]) == (4, 24 + 56 + 72 + 88)
    assert report["roots"]["pipe data"] == 32 and "socket data" not in report["roots"]
    target.send("read")
    assert target.read_line() == "INTACT"
