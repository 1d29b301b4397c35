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
import struct
import time
from collections.abc import Iterator
from contextlib import contextmanager

from unreachable import _native
from unreachable.capture.target import Target
from unreachable.process.status import pid_namespace, read_status, thread_seccomp

IDLE, START, ON, STOP, FAILED = range(5)
_WORDS = struct.Struct("<IiII")  # cmd, error, scanner_pid, ranges
_SCANNER_PID_OFFSET = 8
START_TIMEOUT_S = 5.0  # registering thousands of mappings takes the helper a while
STALE_STOP_S = 1.0  # the helper sees a STOP within 10 ms while it tracks


class TrackingUnavailable(Exception):
    """The target cannot have its writes tracked; the message says why."""


def _why_failed(err: int) -> str:
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTTY):
        return "this kernel has no asynchronous userfaultfd write protection (Linux 6.7 or later)"
    if err == errno.EPERM:
        return (
            "the target may not use userfaultfd (vm.unprivileged_userfaultfd, "
            "or a container's policy)"
        )
    if err == errno.ENOENT:
        return "the helper found no private writable mapping to track"
    return f"the helper could not start write tracking: {os.strerror(err)}"


@contextmanager
def tracked_writes(target: Target) -> Iterator[int]:
    """Writes tracked until the block ends; yields the mappings tracked.
    Raises TrackingUnavailable, having changed nothing, when it cannot be."""
    pid, addr, helper = target.pid, target.header.write_tracker, target.header.helper_tid
    if not addr:
        raise TrackingUnavailable("the shim in the target predates copy snapshots")
    if not helper:
        raise TrackingUnavailable("the shim's helper thread is not running")
    if thread_seccomp(pid, helper) != 0:
        # A filter might kill the process on userfaultfd(); unlike the fork
        # snapshot's clone(), nothing here proves it will not.
        raise TrackingUnavailable("the target has a seccomp filter")
    if pid_namespace(pid) != pid_namespace("self"):
        # The helper checks the scanner's pid for liveness, in its namespace.
        raise TrackingUnavailable("the target is in another pid namespace")
    if read_status(pid).state == "T":
        raise TrackingUnavailable("the target is stopped (SIGSTOP): its helper cannot answer")
    try:
        fd = os.open(f"/proc/{pid}/mem", os.O_RDWR)
    except OSError as e:
        raise TrackingUnavailable(f"cannot write to the target's memory: {e.strerror}") from None
    started = False
    try:

        def cmd() -> tuple[int, int, int]:
            c, err, _, ranges = _WORDS.unpack(os.pread(fd, _WORDS.size, addr))
            return c, err, ranges

        deadline = time.monotonic() + STALE_STOP_S
        while cmd()[0] == STOP and time.monotonic() < deadline:
            time.sleep(0.002)
        if cmd()[0] == ON:
            raise TrackingUnavailable("another scan is copying this process")
        os.pwrite(fd, struct.pack("<I", os.getpid()), addr + _SCANNER_PID_OFFSET)
        os.pwrite(fd, struct.pack("<I", START), addr)
        started = True
        try:
            _native.nudge_thread(helper)
        except OSError as e:
            raise TrackingUnavailable(f"cannot wake the shim's helper: {e.strerror}") from None
        deadline = time.monotonic() + START_TIMEOUT_S
        delay = 0.0005
        while (state := cmd())[0] == START and time.monotonic() < deadline:
            time.sleep(delay)
            delay = min(delay * 2, 0.02)
        c, err, ranges = state
        if c == FAILED:
            started = False
            raise TrackingUnavailable(_why_failed(err))
        if c != ON:
            raise TrackingUnavailable("the shim's helper did not start write tracking")
        yield ranges
    finally:
        try:
            # A helper that gave up by itself is idle: leave its word alone.
            if started and cmd()[0] in (START, ON):
                os.pwrite(fd, struct.pack("<I", STOP), addr)
        except OSError:
            pass  # the target is gone
        os.close(fd)
