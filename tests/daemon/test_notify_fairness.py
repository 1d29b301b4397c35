"""One user's processes asking for scans of themselves on the notify socket
(a fork loop, each child asking once) queued a scan each, and took every
scan slot: another user's RPC scan waited behind them (0.36 s alone, 36.8 s
behind 60 such requests, load 7). A user other than root now has at most
half the slots' worth of such scans queued or running; the others are
answered BUSY, and once those end the user is answered again."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections import Counter

import pytest

from unreachable.daemon.notify_limits import PER_UID

NOBODY = 65534
PYTHON = shutil.which("python3", path="/usr/bin:/bin")
# Connects, waits for "go" on stdin, asks for a scan of itself, prints the
# reply's lines on one, and stays alive (its scan finds it) until stdin closes.
ASK = """
import os, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
sys.stdin.readline()
s.sendall(f"SCAN {os.getpid()}\\n".encode())
print(" ".join(s.makefile("rb").read().decode().split()), flush=True)
s.close()
sys.stdin.read()
"""


def _askers(daemon, n: int) -> list[subprocess.Popen[str]]:
    assert PYTHON is not None
    cmd = [PYTHON, "-c", ASK, str(daemon.notify_socket)]
    return [
        subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, user=NOBODY, group=NOBODY
        )
        for _ in range(n)
    ]


def _replies(procs: list[subprocess.Popen[str]]) -> list[str]:
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    return [p.stdout.readline().strip() for p in procs if p.stdout is not None]


def _end(procs: list[subprocess.Popen[str]]) -> None:
    for p in procs:
        p.kill()
        p.wait()


@pytest.mark.skipif(os.geteuid() != 0 or PYTHON is None, reason="asks as another user")
def test_one_user_queues_at_most_half_the_scan_slots(daemon):
    os.chmod(daemon.dir, 0o755)  # where the notify socket is: any user's
    slots = 8  # the daemon's default max_concurrent_scans
    first = _askers(daemon, PER_UID)
    try:
        replies = Counter(_replies(first))
        # BUSY's second line says it is the user's share, not a scan pending.
        assert replies == {"OK": slots // 2, "BUSY user": PER_UID - slots // 2}, replies
        # Once those scans end, the user is answered again.
        for _ in range(200):
            again = _askers(daemon, 1)
            try:
                if _replies(again) == ["OK"]:
                    break
            finally:
                _end(again)
        else:
            pytest.fail("the user's scans never ended")
    finally:
        _end(first)
