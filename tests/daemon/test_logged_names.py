"""What the daemon logs of a scan that failed names the target's files:
a program whose path holds a newline and a terminal escape wrote a log
line of its own choosing (journald splits stderr at a newline) and steered
the terminal of whoever read the log. Logged messages are written with
unreachable/printable.py's `\\xNN` escapes, as the clients print them."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.scan.test_odd_names import cli
from tests.support.cbuild import build

GLOBALS = Path(__file__).parents[1] / "scan" / "programs" / "globals.c"
# Named like another allocator's library, the program is refused by a scan
# without the shim, and the refusal names the file.
NAME = "libjemalloc-\x1b[2J\nleak:*"


def test_a_failed_scans_log_line_escapes_the_targets_path(daemon, tmp_path):
    exe = tmp_path / NAME
    shutil.copy(build(GLOBALS), exe)
    proc = subprocess.Popen([str(exe)], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith(b"READY")
        res = cli("scan", str(proc.pid), "--remote", daemon.address)
        assert res.returncode != 0 and "jemalloc" in res.stderr, res.stderr
        line = daemon.wait_for_log(rf"scan of pid {proc.pid}: \w+: .*jemalloc").string
        assert "(libjemalloc-\\x1b[2J" in line, line
        assert not [text for text in daemon.log if "\x1b" in text], daemon.log
    finally:
        proc.kill()
        proc.wait(timeout=10)
