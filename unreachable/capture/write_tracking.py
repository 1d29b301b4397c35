"""Have the shim's helper track the target's writes (abi.h struct
ur_write_tracker), for the duration of a copy snapshot.

The helper opens an asynchronous userfaultfd; the scanner takes it
(pidfd_getfd) and write-protects every private writable mapping through it
(the helper does, where the scanner cannot take it). The kernel then
resolves each first write to a page by itself and reports the page as
written in /proc/PID/pagemap. Tracking ends when the scan ends, or, if the
scanner dies, as soon as the helper sees it gone: nothing stays protected.
"""

from __future__ import annotations

import errno
import os
import struct
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from unreachable import _native
from unreachable.capture.descriptor import no_helper_why
from unreachable.capture.in_flight import _getfd, _pidfd
from unreachable.capture.target import Target, current_helper_tid
from unreachable.errors import ScanError
from unreachable.process.maps import Mapping, read_maps
from unreachable.process.status import pid_namespace, read_status, thread_seccomp

if TYPE_CHECKING:
    from unreachable._native import WriteTracker

IDLE, START, ON, STOP, FAILED = (
    _native.TRACK_IDLE,
    _native.TRACK_START,
    _native.TRACK_ON,
    _native.TRACK_STOP,
    _native.TRACK_FAILED,
)
_TRACKER_SIZE = _native.abi_sizeof("ur_write_tracker")
MODE_COW = _native.TRACK_MODE_COW
MODE_SCANNER = _native.TRACK_MODE_SCANNER
# abi.h UR_TRACK_HEARTBEAT_MS is 2 s: a beat every 0.1 s leaves room for a
# busy machine.
HEARTBEAT_S = 0.1
START_TIMEOUT_S = 5.0  # registering thousands of mappings takes the helper a while
START_POLL_S = 0.001  # a read of the tracker's word: ~20 us
STALE_STOP_S = 1.0  # the helper sees a STOP within 10 ms while it tracks
NUDGE_TRIES = 3  # helpers that step aside as they are woken (namespaces.c)


class TrackingUnavailable(Exception):
    """The target cannot have its writes tracked; the message says why."""


def _why_failed(err: int, pid: int) -> str:
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTTY):
        return "this kernel has no asynchronous userfaultfd write protection (Linux 6.7 or later)"
    if err == errno.EPERM:
        return (
            "the target may not use userfaultfd (vm.unprivileged_userfaultfd, "
            "or a container's policy)"
        )
    if err == errno.ENOENT and not os.path.lexists(f"/proc/{pid}/root/proc/self"):
        # The shim keeps its maps open from the start for this (self_maps.c);
        # a program that closes every descriptor closes that one too.
        return (
            "the target cannot read its own /proc/self/maps (it is chrooted, or its mount"
            " namespace has no /proc) and has closed the descriptor the shim kept for it"
        )
    if err == errno.ENOENT:
        return "the helper found no private writable mapping to track"
    return f"the helper could not start write tracking: {os.strerror(err)}"


def _trackable_helper(target: Target) -> int:
    """The helper thread that would track the writes, or TrackingUnavailable
    saying why none can."""
    pid, helper = target.pid, target.header.helper_tid
    if not target.header.write_tracker:
        raise TrackingUnavailable("the shim in the target predates copy snapshots")
    if not helper or not os.path.exists(f"/proc/{pid}/task/{helper}"):
        helper = current_helper_tid(target)  # replaced since it was read
    if not helper:
        raise TrackingUnavailable(
            "the shim's helper thread is not running" + no_helper_why(target.header)
        )
    if thread_seccomp(pid, helper) != 0:
        # A filter might kill the process on userfaultfd(); unlike the fork
        # snapshot's clone(), nothing here proves it will not.
        raise TrackingUnavailable("the target has a seccomp filter")
    if read_status(pid).state == "T":
        raise TrackingUnavailable("the target is stopped (SIGSTOP): its helper cannot answer")
    return helper


@contextmanager
def tracked_writes(
    target: Target, mode: int = 0, arm_here: bool = True, beside: bool = True
) -> Iterator[int]:
    """Writes tracked until the block ends; yields the mappings tracked.
    Raises TrackingUnavailable, having changed nothing, when it cannot be.
    mode MODE_COW: the helper opens a synchronous userfaultfd and registers
    nothing (copy_snapshot.py takes it). Otherwise the helper opens the
    asynchronous one and, with arm_here, the scanner registers and
    protects the target's mappings through a duplicate of it (_arm), so
    that the page-table walks run in the scan's scheduling group; the
    helper arms them itself where that duplicate cannot be had, or where
    its shim predates MODE_SCANNER. beside: end_in_background's."""
    ended(target.pid)
    tracking = _Tracking(target, _trackable_helper(target), beside)
    try:
        yield tracking.begin(mode, arm_here)
    finally:
        tracking.finish()


class _Tracking:
    """One tracking of a target's writes, spoken through its tracker's
    fields in /proc/PID/mem."""

    def __init__(self, target: Target, helper: int, beside: bool = True) -> None:
        self.target, self.helper, self.beside = target, helper, beside
        self.pid, self.addr = target.pid, target.header.write_tracker
        try:
            self.fd = os.open(f"/proc/{self.pid}/mem", os.O_RDWR)
        except OSError as e:
            raise TrackingUnavailable(
                f"cannot write to the target's memory: {e.strerror}"
            ) from None
        self.started = False
        self.uffd = -1  # the helper's descriptor, where the scanner armed through it
        self.beating = threading.Event()
        self.beat = threading.Thread(
            target=_heartbeat, args=(self.fd, self.addr, self.beating), daemon=True
        )

    def cmd(self) -> tuple[int, int, int]:
        t = read_tracker(self.fd, self.addr)
        return t["cmd"], t["error"], t["ranges"]

    def wait_while(self, state: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while self.cmd()[0] == state and time.monotonic() < deadline:
            time.sleep(0.002)

    def begin(self, mode: int, arm_here: bool) -> int:
        self.wait_while(STOP, STALE_STOP_S)
        if self.cmd()[0] == ON:
            raise TrackingUnavailable("another scan is copying this process")
        # The helper watches the scanner's pid, in its own namespace; a scanner
        # outside it (the target in a container) has none there and beats instead.
        foreign = pid_namespace(self.pid) != pid_namespace("self")
        _write_field(self.fd, self.addr, "scanner_pid", 0 if foreign else os.getpid())
        # A copy-on-write snapshot's helper also ends it when the beats stop
        # (a stopped scanner serves no fault).
        if foreign or mode == MODE_COW:
            self.beat.start()
        if mode != 0 or not arm_here:
            return self.start(mode)
        ranges = self.start(MODE_SCANNER)
        # An older shim armed by itself (ranges > 0) and takes it down.
        return ranges or self.arm_here()

    def arm_here(self) -> int:
        """Arm through the helper's descriptor; where that arms nothing (no
        duplicate, no pagemap, no mapping the scanner could protect), the
        helper's own way."""
        self.uffd = helper_uffd(self.pid, asynchronous=True)
        try:
            ranges = _arm(self.uffd, self.pid) if self.uffd >= 0 else 0
        except (OSError, ScanError):
            ranges = 0
        if ranges:
            return ranges
        if self.uffd >= 0:
            _disarm(self.uffd, self.pid)
            os.close(self.uffd)
            self.uffd = -1
        _write_field(self.fd, self.addr, "cmd", STOP)
        self.started = False
        self.wait_while(STOP, STALE_STOP_S)
        return self.start(0)

    def start(self, asked: int) -> int:
        _write_field(self.fd, self.addr, "reserved", asked)
        _write_field(self.fd, self.addr, "cmd", START)
        self.started = True
        self.nudge()
        deadline = time.monotonic() + START_TIMEOUT_S
        delay = 0.0005
        while (state := self.cmd())[0] == START and time.monotonic() < deadline:
            time.sleep(delay)
            # Polled at least every START_POLL_S: the scan waits for the
            # helper's start (tens of ms on a big heap), and a backoff
            # doubling past it added up to half of that again.
            delay = min(delay * 2, START_POLL_S)
        c, err, ranges = state
        if c == FAILED:
            self.started = False
            raise TrackingUnavailable(_why_failed(err, self.pid))
        if c != ON:
            raise TrackingUnavailable("the shim's helper did not start write tracking")
        return ranges

    def nudge(self) -> None:
        for attempt in range(NUDGE_TRIES):
            try:
                _native.nudge_thread(self.pid, self.helper)
                return
            except OSError as e:
                # Gone: stepped aside, and its successor may be asleep already.
                if e.errno == errno.ESRCH and attempt + 1 < NUDGE_TRIES:
                    if new := current_helper_tid(self.target):
                        self.helper = new
                        continue
                why = os.strerror(e.errno) if e.errno else e.strerror
                raise TrackingUnavailable(f"cannot wake the shim's helper: {why}") from None

    def finish(self) -> None:
        if self.uffd < 0:
            self.end()
            return
        # Unregistering clears every page's protection (35-40 ms per GiB):
        # beside the rest of the scan (fold, symbolize, report) rather
        # than before it. The next tracking of the target, and the
        # interpreter's exit, wait for it.
        end_in_background(self.pid, self.end, self.beside)

    def end(self) -> None:
        if self.uffd >= 0:
            # Before the STOP: the helper's own walk then finds nothing
            # left to unregister. Should the scanner die first, that
            # walk does it.
            _disarm(self.uffd, self.pid)
            os.close(self.uffd)
        try:
            # A helper that gave up by itself is idle: leave its word alone.
            if self.started and self.cmd()[0] in (START, ON):
                _write_field(self.fd, self.addr, "cmd", STOP)
        except (OSError, ValueError):
            pass  # the target is gone (its memory reads empty once it exits)
        self.beating.set()
        if self.beat.is_alive():
            self.beat.join()
        os.close(self.fd)


# The tracking being taken down in the background, by target pid.
_ending: dict[int, list[threading.Thread]] = {}


def end_in_background(pid: int, end: Callable[[], object], beside: bool = True) -> None:
    """Run end (a tracking's or a snapshot's teardown) on a thread of its
    own, beside the rest of the scan. The next tracking of pid and the
    next plan's capture (ended) wait for it, and so does the interpreter's
    exit (the thread is not a daemon):
    a scan that returns has its target let go by the time its process
    exits. Should the scanner die first, the helper's own teardown ends
    what this would have.

    beside False: the target's busy threads leave the scan one core, which
    the calling thread holds; a second thread of the scan would share the
    core of one of the target's threads, which then waits a scheduler
    slice at a time (docs/pause.md "What the target feels"). So end runs
    here, before the rest of the scan."""
    if not beside:
        end()
        return
    ending = threading.Thread(target=end, name="untrack")
    _ending[pid] = [t for t in _ending.get(pid, ()) if t.is_alive()] + [ending]
    ending.start()


def ended(pid: int) -> None:
    """Until every teardown end_in_background started for pid is done."""
    for ending in _ending.pop(pid, ()):
        ending.join()


def _arm(uffd: int, pid: int) -> int:
    """Register and write-protect, through the helper's userfaultfd, what
    the helper would (write_tracking.c track_mapping): every private
    writable mapping. Returns how many; OSError without the pagemap."""
    triples = [
        (m.start, m.end, 1 if m.inode == 0 else 0)
        for m in read_maps(pid)
        if m.readable and m.writable and m.private
    ]
    flat = [x for t in triples for x in t]
    return int(_native.track_arm(uffd, pid, struct.pack(f"<{len(flat)}Q", *flat)))


def _disarm(uffd: int, pid: int) -> None:
    """Unregister every mapping the target has now (one may have changed
    its protection since it was armed), as the helper's teardown does."""
    try:
        maps = read_maps(pid)
    except (OSError, ScanError):
        return  # gone: nothing to take down
    pairs = [x for m in _disarmed(maps) for x in (m.start, m.end)]
    _native.track_disarm(uffd, pid, struct.pack(f"<{len(pairs)}Q", *pairs))


def _disarmed(maps: list[Mapping]) -> list[Mapping]:
    """The mappings _disarm unregisters: all but those with no access, which
    were never registered (_arm takes private writable ones) and, made so
    since, hold no page a thread could fault on (closing the descriptor
    unregisters them). Walked in pieces, MariaDB's 8 TiB reservation took
    seconds of the scan's CPU and held the target's mmap lock meanwhile."""
    return [m for m in maps if m.readable or m.writable]


def wait_untracked(target: Target, timeout_s: float = 2.0) -> bool:
    """Until the helper has taken the tracking down after a STOP (every
    mapping unregistered, its userfaultfd closed): a scan that goes on to
    another snapshot stops the target once the helper is free again, not
    while it still holds the target's mmap lock. False when it has not by
    then (the next snapshot waits for it as before)."""
    ended(target.pid)
    addr = target.header.write_tracker
    deadline = time.monotonic() + timeout_s
    try:
        with open(f"/proc/{target.pid}/mem", "rb", buffering=0) as f:
            while read_tracker(f.fileno(), addr)["cmd"] not in (IDLE, FAILED):
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.002)
            return True
    except OSError:
        return False  # the target is gone: the next step says so


def read_tracker(fd: int, addr: int) -> WriteTracker:
    """The tracker at addr, read through fd (the target's /proc/PID/mem)."""
    return _native.abi_decode("ur_write_tracker", os.pread(fd, _TRACKER_SIZE, addr))


def _write_field(fd: int, addr: int, name: str, value: int) -> None:
    """One field of the tracker at addr, in one write (the helper reads it without a lock)."""
    at, size = _native.abi_field("ur_write_tracker", name)
    os.pwrite(fd, value.to_bytes(size, "little"), addr + at)


def _heartbeat(fd: int, addr: int, done: threading.Event) -> None:
    """Bump the tracker's heartbeat until `done` (abi.h ur_write_tracker)."""
    n = 0
    while not done.wait(HEARTBEAT_S):
        n += 1
        try:
            _write_field(fd, addr, "heartbeat", n)
        except OSError:
            return  # the target is gone


_UFFD_FEATURE_WP_ASYNC = 1 << 15


def helper_uffd(pid: int, asynchronous: bool) -> int:
    """A duplicate (pidfd_getfd) of the helper's userfaultfd: the target's
    one userfaultfd with asynchronous write protection (write tracking), or
    the one without it (a copy-on-write snapshot's); -1 when there is not
    exactly one, or it cannot be had."""
    found = []
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return -1
    for name in names:
        try:
            if os.readlink(f"/proc/{pid}/fd/{name}") != "anon_inode:[userfaultfd]":
                continue
            with open(f"/proc/{pid}/fdinfo/{name}") as f:
                api = next((ln.split()[1] for ln in f if ln.startswith("API:")), "")
        except (OSError, IndexError):
            continue
        parts = api.split(":")
        if len(parts) > 1 and bool(int(parts[1], 16) & _UFFD_FEATURE_WP_ASYNC) == asynchronous:
            found.append(int(name))
    if len(found) != 1 or (pidfd := _pidfd(pid)) is None:
        return -1
    try:
        return _getfd(pidfd, found[0])
    finally:
        os.close(pidfd)
