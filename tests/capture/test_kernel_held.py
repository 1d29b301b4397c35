"""Pointers the kernel holds as roots (unreachable/capture/kernel_held.py):
epoll registrations' data, read in the pause when there are few, around it
when there are many; POSIX timers' values; queued signals' values."""

from __future__ import annotations

import os
import select
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from unreachable.capture.kernel_held import KernelHeld
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
