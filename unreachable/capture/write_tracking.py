"""Have the shim's helper track the target's writes (abi.h struct
ur_write_tracker), for the duration of a copy snapshot.

The helper write-protects every private writable mapping with an
asynchronous userfaultfd; the kernel then resolves each first write to a page
by itself and reports the page as written in /proc/PID/pagemap. Tracking ends
when the scan ends, or, if the scanner dies, as soon as the helper sees it
gone: nothing stays protected.
"""

from __future__ import annotations

import errno
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from unreachable import _native
from unreachable.capture.in_flight import _getfd, _pidfd
from unreachable.capture.target import Target, current_helper_tid
from unreachable.process.status import pid_namespace, read_status, thread_seccomp

IDLE, START, ON, STOP, FAILED = (
    _native.TRACK_IDLE,
    _native.TRACK_START,
    _native.TRACK_ON,
    _native.TRACK_STOP,
    _native.TRACK_FAILED,
)
_TRACKER_SIZE = _native.abi_sizeof("ur_write_tracker")
MODE_COW = 1  # abi.h UR_TRACK_MODE_COW
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
        raise TrackingUnavailable("the shim's helper thread is not running")
    if thread_seccomp(pid, helper) != 0:
        # A filter might kill the process on userfaultfd(); unlike the fork
        # snapshot's clone(), nothing here proves it will not.
        raise TrackingUnavailable("the target has a seccomp filter")
    if read_status(pid).state == "T":
        raise TrackingUnavailable("the target is stopped (SIGSTOP): its helper cannot answer")
    return helper


@contextmanager
def tracked_writes(target: Target, mode: int = 0) -> Iterator[int]:
    """Writes tracked until the block ends; yields the mappings tracked.
    Raises TrackingUnavailable, having changed nothing, when it cannot be.
    mode MODE_COW: the helper opens a synchronous userfaultfd and registers
    nothing (copy_snapshot.py takes it)."""
    pid, addr = target.pid, target.header.write_tracker
    helper = _trackable_helper(target)
    # The helper watches the scanner's pid, in its own namespace; a scanner
    # outside it (the target in a container) has none there and beats instead.
    foreign = pid_namespace(pid) != pid_namespace("self")
    try:
        fd = os.open(f"/proc/{pid}/mem", os.O_RDWR)
    except OSError as e:
        raise TrackingUnavailable(f"cannot write to the target's memory: {e.strerror}") from None
    started = False
    beating = threading.Event()
    beat = threading.Thread(target=_heartbeat, args=(fd, addr, beating), daemon=True)
    try:

        def cmd() -> tuple[int, int, int]:
            t = _native.abi_decode("ur_write_tracker", os.pread(fd, _TRACKER_SIZE, addr))
            return t["cmd"], t["error"], t["ranges"]

        deadline = time.monotonic() + STALE_STOP_S
        while cmd()[0] == STOP and time.monotonic() < deadline:
            time.sleep(0.002)
        if cmd()[0] == ON:
            raise TrackingUnavailable("another scan is copying this process")
        _write_field(fd, addr, "scanner_pid", 0 if foreign else os.getpid())
        _write_field(fd, addr, "reserved", mode)
        # A copy-on-write snapshot's helper also ends it when the beats stop
        # (a stopped scanner serves no fault).
        if foreign or mode == MODE_COW:
            beat.start()
        _write_field(fd, addr, "cmd", START)
        started = True
        for attempt in range(NUDGE_TRIES):
            try:
                _native.nudge_thread(helper)
                break
            except OSError as e:
                # Gone: stepped aside, and its successor may be asleep already.
                if e.errno == errno.ESRCH and attempt + 1 < NUDGE_TRIES:
                    if helper := current_helper_tid(target):
                        continue
                why = os.strerror(e.errno) if e.errno else e.strerror
                raise TrackingUnavailable(f"cannot wake the shim's helper: {why}") from None
        deadline = time.monotonic() + START_TIMEOUT_S
        delay = 0.0005
        while (state := cmd())[0] == START and time.monotonic() < deadline:
            time.sleep(delay)
            # Polled at least every START_POLL_S: the scan waits for the
            # helper's start (tens of ms on a big heap), and a backoff
            # doubling past it added up to half of that again.
            delay = min(delay * 2, START_POLL_S)
        c, err, ranges = state
        if c == FAILED:
            started = False
            raise TrackingUnavailable(_why_failed(err, pid))
        if c != ON:
            raise TrackingUnavailable("the shim's helper did not start write tracking")
        yield ranges
    finally:
        try:
            # A helper that gave up by itself is idle: leave its word alone.
            if started and cmd()[0] in (START, ON):
                _write_field(fd, addr, "cmd", STOP)
        except OSError:
            pass  # the target is gone
        beating.set()
        if beat.is_alive():
            beat.join()
        os.close(fd)


def wait_untracked(target: Target, timeout_s: float = 2.0) -> bool:
    """Until the helper has taken the tracking down after a STOP (every
    mapping unregistered, its userfaultfd closed): a scan that goes on to
    another snapshot stops the target once the helper is free again, not
    while it still holds the target's mmap lock. False when it has not by
    then (the next snapshot waits for it as before)."""
    addr = target.header.write_tracker
    deadline = time.monotonic() + timeout_s
    try:
        with open(f"/proc/{target.pid}/mem", "rb", buffering=0) as f:
            while True:
                f.seek(addr)
                raw = _native.abi_decode("ur_write_tracker", f.read(_TRACKER_SIZE))
                if raw["cmd"] in (IDLE, FAILED):
                    return True
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.002)
    except OSError:
        return False  # the target is gone: the next step says so


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
