"""A target holding more unix sockets than the scanner may open files: the
scan duplicates their queues only as far as its descriptor limit leaves
room, and still finishes (it failed with EMFILE, an internal error)."""

from __future__ import annotations

import resource
import subprocess
import sys

# 600 connections to its own listening socket: 1,200 unix sockets.
HOLDER = """
import resource, socket, sys, tempfile
resource.setrlimit(resource.RLIMIT_NOFILE, (4096, 4096))
path = tempfile.mkdtemp() + "/s"
server = socket.socket(socket.AF_UNIX)
server.bind(path)
server.listen(1000)
held = []
for _ in range(600):
    c = socket.socket(socket.AF_UNIX)
    c.connect(path)
    held += [c, server.accept()[0]]
print("ready", flush=True)
sys.stdin.read()
"""


def _limit_files() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))


def test_a_target_with_more_sockets_than_the_scanner_may_open(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "ready\n"
        res = subprocess.run(
            [sys.executable, "-m", "unreachable.cli.main", "scan", str(holder.pid), "--json"],
            capture_output=True,
            text=True,
            timeout=300,
            preexec_fn=_limit_files,
        )
        assert res.returncode in (0, 1), res.stderr
        assert holder.poll() is None
    finally:
        holder.kill()
        holder.wait(timeout=10)
