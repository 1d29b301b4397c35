"""Pointers only the kernel holds: the data of epoll registrations, the
values of POSIX timers and of queued signals, and, without the shim,
the alternate signal stacks of its threads.

An event loop may keep a connection object nowhere but in its epoll
registration: epoll_ctl gets the pointer as event.data, epoll_wait hands it
back. Nothing in the process's memory points to the object then, yet it is
in use; a scan that looks only at memory would report it leaked, as
LeakSanitizer does. The kernel lists every registration of an epoll
descriptor, with its data, in /proc/PID/fdinfo/EPFD ("tfd: ... data: HEX"),
so those values count as roots, as register values do.

The epoll descriptors are found before the stop (a readlink per
descriptor, ~8 us each: too slow for the pause of a process with many) and
their registrations read then too, to count them. While the target is
stopped they are read again, so the roots are the snapshot's: ~1.2 us per
registration (the kernel formats each line). Past IN_PAUSE_MAX of them that
would stretch the pause (20k: 24 ms), so they are read once more after the
release instead, and the values of both reads count: only a registration
made after the first read and removed before the last, whose object had no
other reference at the snapshot, is missed. An epoll descriptor created
after the listing is missed too.

A POSIX timer that notifies by signal hands its sigev_value back in the
signal's siginfo, and a program may keep a pointer only there too;
/proc/PID/timers shows it ("signal: SIGNO/HEX"). The file is short (one
entry per timer) and read in the pause.

A signal sent with a value (sigqueue, a timer's expiry, a message queue's
notification) and not yet delivered holds its value in the kernel's queue:
a block handed to a thread that has the signal blocked, or collects it with
sigwaitinfo, has no other pointer until then. The queues are read in the
pause through ptrace (native/scanner/pending_signals.c).

Bytes written to a pipe or a unix socket and not yet read are read in the
pause too (in_flight.py).

A program may malloc a stack, install it with sigaltstack() and keep no
pointer to it (Erlang's VM does, for each thread). The shim records each
thread's (roots/signal_stacks.py); without it, the stopped threads are
asked with an injected sigaltstack(NULL, &old) (signal_stacks.py), and
each enabled stack's address is a root, as the shim's record is.
"""

from __future__ import annotations

import os
import re
import struct
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from unreachable.capture.in_flight import InFlight

if TYPE_CHECKING:
    # Asked by the stopper only, without the shim: a shimmed scan does not
    # import it (a frozen record made at import, ~1% of a scan's instructions).
    from unreachable.capture.signal_stacks import SignalStacks

IN_PAUSE_MAX = 4096  # registrations read in the pause (~5 ms)

_DATA = re.compile(rb"^tfd:.*\sdata:\s*([0-9a-f]+)", re.MULTILINE)
_TIMER_VALUE = re.compile(rb"^signal: \d+/([0-9a-f]+)", re.MULTILINE)


def fd_links(pid: int) -> dict[int, str]:
    """What /proc/PID/fd says of each of the target's descriptors (none if
    they cannot be listed)."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return {}
    found = {}
    for fd in fds:
        try:
            found[int(fd)] = os.readlink(f"/proc/{pid}/fd/{fd}")
        except (OSError, ValueError):
            continue  # closed since the listing
    return found


def epoll_fds(pid: int, links: dict[int, str] | None = None) -> list[int]:
    """The target's epoll descriptors (none if they cannot be listed)."""
    links = fd_links(pid) if links is None else links
    return sorted(fd for fd, link in links.items() if link == "anon_inode:[eventpoll]")


def read_registrations(pid: int, fds: list[int]) -> list[bytes]:
    """The fdinfo text of each epoll descriptor, unparsed. A descriptor
    closed since epoll_fds reads as nothing, one reused for something else
    as no registration."""
    texts = []
    for fd in fds:
        try:
            with open(f"/proc/{pid}/fdinfo/{fd}", "rb") as f:
                texts.append(f.read())
        except OSError:
            continue
    return texts


def read_timers(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/timers", "rb") as f:
            return f.read()
    except OSError:
        return b""


def _words(values: set[int]) -> bytes:
    return struct.pack(f"<{len(values)}Q", *sorted(values))


def _count(texts: list[bytes]) -> int:
    return sum(text.count(b"\ntfd:") for text in texts)


@dataclass(slots=True, eq=False, repr=False)
class KernelHeld:
    """Pointers the kernel holds for the target: epoll, timers, signals, pipes, sockets."""

    pid: int
    fds: list[int] = field(default_factory=list)  # epoll descriptors
    before: list[bytes] = field(default_factory=list)  # their fdinfo before the stop
    count: int = 0  # registrations in `before`
    in_pause: list[bytes] | None = None  # their fdinfo while stopped, when few enough
    timers: bytes = b""  # /proc/PID/timers while stopped
    signals: bytes = b""  # queued signals' values while stopped, as words
    in_flight: InFlight = field(default_factory=InFlight)  # pipes' and sockets' bytes
    # Without the shim: each thread's sigaltstack as the kernel answered it, as words
    signal_stacks: bytes = b""
    signal_stacks_note: str = ""  # why some threads' were not asked

    @classmethod
    def before_stop(cls, pid: int) -> KernelHeld:
        links = fd_links(pid)
        fds = epoll_fds(pid, links)
        before = read_registrations(pid, fds) if fds else []
        return cls(pid, fds, before, _count(before), in_flight=InFlight.before_stop(pid, links))

    def take_signal_stacks(self, asked: SignalStacks) -> None:
        self.signal_stacks = asked.words()
        self.signal_stacks_note = asked.note()

    @property
    def note(self) -> str:
        return "; ".join(n for n in (self.in_flight.note, self.signal_stacks_note) if n)

    def read_in_pause(self, limit: int = IN_PAUSE_MAX) -> None:
        self.timers = read_timers(self.pid)
        if self.fds and self.count <= limit:
            self.in_pause = read_registrations(self.pid, self.fds)
        self.in_flight.read_in_pause()

    def close(self) -> None:
        """Lets go of the pipes and sockets not read (a stop that failed)."""
        self.in_flight.close()

    def epoll_words(self) -> bytes:
        """Every registration's data, as little-endian 64-bit words: the
        pause's, or both reads around it (call it after the release then)."""
        if not self.fds:
            return b""
        if self.in_pause is not None:
            texts = self.in_pause
        else:
            texts = self.before + read_registrations(self.pid, self.fds)
        return _words({int(m, 16) for text in texts for m in _DATA.findall(text)})

    def signal_words(self) -> bytes:
        return _words(set(struct.unpack(f"<{len(self.signals) // 8}Q", self.signals)))

    def timer_words(self) -> bytes:
        return _words({int(m, 16) for m in _TIMER_VALUE.findall(self.timers)})
