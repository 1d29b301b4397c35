"""One user holding connections to the world-writable notify socket holds
at most PER_UID of the daemon's file descriptors, and a flood of bad
requests writes a few warnings, not one each."""

from __future__ import annotations

import os
import socket
import time

from unreachable.daemon.notify_limits import PER_UID, WARNINGS_PER_MINUTE

HELD = 300


def _connect(path: str) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)  # blocking: a full backlog waits instead of EAGAIN
    s.settimeout(10)
    return s


def _daemon_fds(daemon) -> int:
    return len(os.listdir(f"/proc/{daemon.proc.pid}/fd"))


def _settles(check, seconds: float = 2.0) -> bool:
    """Whether check() holds within `seconds` (the daemon's loop closes the
    refused connections as it gets to them); well inside the 5 s it would
    otherwise wait for a held connection's request."""
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_held_connections_do_not_take_the_daemons_descriptors(daemon):
    before = _daemon_fds(daemon)
    held = [_connect(str(daemon.notify_socket)) for _ in range(HELD)]
    try:
        # The first PER_UID wait for their request; the rest are refused at once.
        assert held[-1].recv(100) == b"ERR too many requests waiting\n"
        assert held[PER_UID].recv(100) == b"ERR too many requests waiting\n"
        assert _settles(lambda: _daemon_fds(daemon) < before + 2 * PER_UID + 8)
    finally:
        for s in held:
            s.close()
    # Once the held ones are closed, requests are answered again; a flood of
    # bad ones logs a few warnings.
    assert _settles(lambda: _daemon_fds(daemon) <= before + 2)
    for _ in range(100):
        with _connect(str(daemon.notify_socket)) as s:
            s.sendall(b"HELLO\n")
            assert s.recv(100) == b"ERR expected 'SCAN <pid>'\n"
    warnings = [line for line in daemon.log if "notify:" in line and "WARNING" in line]
    assert len(warnings) <= WARNINGS_PER_MINUTE + 1, warnings[-3:]
