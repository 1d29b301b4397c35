"""The notify socket's SO_PEERCRED pid is the pid of whoever connected: a
process that connects, forks, exits and leaves the connection to its child
must not have the daemon scan the next process given its pid."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tests.support.cbuild import build

VICTIM = Path(__file__).parent.parent / "scan" / "programs" / "globals.c"
# Connects, forks a child that keeps the connection, prints its own pid and
# exits; the child sends `SCAN <that pid>` when told and prints the reply.
REQUESTER = """
import os, socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
me = os.getpid()
if os.fork() == 0:
    sys.stdin.readline()
    s.settimeout(20)
    s.sendall(f"SCAN {me}\\n".encode())
    print(s.recv(200).decode().strip(), flush=True)
    os._exit(0)
print(me, flush=True)
"""


def _start_with_pid(pid: int, argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    """A process given `pid` (the kernel hands out ns_last_pid + 1 next)."""
    for _ in range(50):
        with open("/proc/sys/kernel/ns_last_pid", "w") as f:
            f.write(str(pid - 1))
        proc = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        if proc.pid == pid:
            return proc
        proc.kill()
        proc.wait()
    raise AssertionError(f"pid {pid} not given to a new process in 50 tries")


def test_a_request_left_behind_by_an_exited_process_scans_nothing(daemon, shim):
    victim_exe = str(build(VICTIM))
    requester = subprocess.Popen(
        [sys.executable, "-c", REQUESTER, str(daemon.notify_socket)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert requester.stdout is not None and requester.stdin is not None
    gone = int(requester.stdout.readline())
    requester.wait(timeout=10)
    victim = _start_with_pid(gone, [victim_exe], dict(os.environ, LD_PRELOAD=str(shim)))
    try:
        assert victim.stdout is not None
        victim.stdout.readline()  # the program is ready
        requester.stdin.write("go\n")
        requester.stdin.flush()
        assert requester.stdout.readline().strip() == "ERR the process that connected has exited"
        time.sleep(1)  # a scan, had one been queued, would have begun
        assert not any(f"pid {gone}" in line and "signal scan" in line for line in daemon.log)
    finally:
        victim.kill()
        victim.wait(timeout=10)
        requester.stdin.close()
