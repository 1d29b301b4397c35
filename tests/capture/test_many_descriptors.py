"""A target holding more unix sockets than the scanner may open files: the
scan duplicates their queues only as far as its descriptor limit leaves
room, and still finishes (it failed with EMFILE, an internal error); the
report says how many it did not read (it said nothing)."""

from __future__ import annotations

import json
import re
import resource
import subprocess
import sys
from collections.abc import Callable

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


def _scan_note(holder_source: str, preexec: Callable[[], None] | None = None) -> str:
    """The snapshot note of a CLI scan of a Python process running
    holder_source, which must stay alive through it."""
    holder = subprocess.Popen(
        [sys.executable, "-c", holder_source],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "ready\n"
        res = subprocess.run(
            [sys.executable, "-m", "unreachable.cli.main", "scan", str(holder.pid), "--json"],
            capture_output=True,
            text=True,
            timeout=300,
            preexec_fn=preexec,
        )
        assert res.returncode in (0, 1), res.stderr
        assert holder.poll() is None
    finally:
        holder.kill()
        holder.wait(timeout=10)
    return str(json.loads(res.stdout)["snapshot_note"])


def test_a_target_with_more_sockets_than_the_scanner_may_open():
    note = _scan_note(HOLDER, _limit_files)
    unread = re.search(r"(\d+) of the target's pipe and unix socket descriptors not read", note)
    assert unread, note
    # 1,200 sockets, at most 1,024 - 256 descriptors to spare.
    assert 1200 - (1024 - 256) <= int(unread.group(1)) < 1200, note


# 72 pipes holding 1 MiB each: past the 64 MiB a scan reads of queues.
FULL_PIPES = """
import fcntl, os, sys
held = []
for _ in range(72):
    r, w = os.pipe()
    fcntl.fcntl(w, 1031, 1 << 20)  # F_SETPIPE_SZ
    os.set_blocking(w, False)
    os.write(w, bytes(1 << 20))
    held.append((r, w))
print("ready", flush=True)
sys.stdin.read()
"""


def test_queues_past_the_bytes_a_scan_reads_are_counted():
    note = _scan_note(FULL_PIPES)
    unread = re.search(r"(\d+) queues of pipes or unix sockets not read \(past 64 MiB", note)
    assert unread and 1 <= int(unread.group(1)) <= 72 - 64, note
