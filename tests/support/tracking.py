"""Whether a target is still write-tracked by a copy snapshot: the kernel's
view (smaps VmFlags "uw") and the shim's (its tracker word)."""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from unreachable import _native
from unreachable.capture.target import open_target
from unreachable.capture.write_tracking import IDLE


def write_protected(pid: int) -> list[str]:
    """The mappings the kernel still marks as userfaultfd write-protected."""
    found, header = [], ""
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            if line[0] in "0123456789abcdef" and "-" in line.split()[0]:
                header = line.strip()
            elif line.startswith("VmFlags:") and "uw" in line.split()[1:]:
                found.append(header)
    return found


def tracker_cmd(pid: int) -> int:
    addr = open_target(pid).header.write_tracker
    with open(f"/proc/{pid}/mem", "rb") as f:
        f.seek(addr)
        return _native.abi_decode(
            "ur_write_tracker", f.read(_native.abi_sizeof("ur_write_tracker"))
        )["cmd"]


def kill_scanner_while_tracking(pid: int) -> None:
    """Start `unreachable-cli scan --snapshot copy` of pid and SIGKILL it as
    soon as the target's memory is write-protected (mid-copy)."""
    scanner = subprocess.Popen(
        [sys.executable, "-m", "unreachable.cli.main", "scan", str(pid), "--snapshot", "copy"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while not write_protected(pid):
        assert scanner.poll() is None and time.monotonic() < deadline, "tracking never began"
        time.sleep(0.001)
    os.kill(scanner.pid, signal.SIGKILL)
    scanner.wait()


def wait_untracked(pid: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while write_protected(pid) or tracker_cmd(pid) != IDLE:
        assert time.monotonic() < deadline, (write_protected(pid)[:3], tracker_cmd(pid))
        time.sleep(0.02)


_SYS_USERFAULTFD = 323  # x86_64
_UFFD_USER_MODE_ONLY = 1
_UFFD_API = 0xAA
_UFFDIO_API = 0xC018AA3F  # _IOWR(0xAA, 0x3F, struct uffdio_api)
_UFFD_FEATURE_WP_ASYNC = 1 << 15


def strace_for_tracking(whose: str) -> str:
    """strace's path, for a test that counts whose ioctls over a write
    tracking; skips the test where this machine has no copy snapshots or
    no strace."""
    if why := copy_unsupported():
        pytest.skip(why)
    strace = shutil.which("strace")
    if strace is None:
        pytest.skip(f"no strace to count the {whose} calls")
    return strace


def copy_unsupported() -> str:
    """Why this machine cannot make copy snapshots ("" when it can): the
    same userfaultfd the shim's helper opens, asked for the same feature."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.syscall(_SYS_USERFAULTFD, os.O_CLOEXEC | _UFFD_USER_MODE_ONLY)
    if fd < 0 and ctypes.get_errno() == errno.EINVAL:
        fd = libc.syscall(_SYS_USERFAULTFD, os.O_CLOEXEC)
    if fd < 0:
        return f"no userfaultfd here: {os.strerror(ctypes.get_errno())}"
    try:
        api = (ctypes.c_uint64 * 3)(_UFFD_API, _UFFD_FEATURE_WP_ASYNC, 0)
        if libc.ioctl(fd, ctypes.c_ulong(_UFFDIO_API), api) != 0:
            return "no asynchronous userfaultfd write protection (Linux 6.7)"
    finally:
        os.close(fd)
    return ""
