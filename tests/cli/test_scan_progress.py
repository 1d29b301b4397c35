"""A local scan draws its progress on stderr when that is a terminal (a pty
here), and stays silent on a pipe or with --json."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

PROGRAMS = Path(__file__).parent.parent / "scan" / "programs"
CLI = [sys.executable, "-m", "unreachable.cli.main"]


def scan_on_pty(*args: str) -> tuple[int, str, str]:
    """Run a scan with stderr on a pty; its exit status, stdout and what the
    terminal received."""
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen(
            [*CLI, "scan", *args], stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL
        )
        os.close(slave)
        slave = -1
        out = proc.stdout.read().decode()
        proc.stdout.close()
        rc = proc.wait(timeout=120)
        seen = b""
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: every writer is gone and all was read
                break
            if not chunk:
                break
            seen += chunk
        return rc, out, seen.decode(errors="replace")
    finally:
        os.close(master)
        if slave >= 0:
            os.close(slave)


def test_progress_line_on_a_terminal(targets):
    target = targets.start(PROGRAMS / "graph.c")
    rc, out, terminal = scan_on_pty(str(target.pid))
    assert rc == 1, terminal
    assert f"scanning pid {target.pid} [" in terminal
    for stage in ("captured", "marked", "done"):
        assert f"] {stage} " in terminal, terminal
    # cleared before the summary line is printed
    last = terminal.split("\r")[-2]
    assert last.startswith("\x1b[K") and "unreachable out of" in last, last
    # the line is cleared before the report goes out: stdout holds only the report
    assert "scanning pid" not in out and "unreachable allocations" in out


def test_no_progress_with_json_on_a_terminal(targets):
    target = targets.start(PROGRAMS / "graph.c")
    rc, out, terminal = scan_on_pty(str(target.pid), "--json")
    assert rc == 1, terminal
    assert "scanning pid" not in terminal and out.startswith("{")


def test_no_progress_on_a_pipe(targets):
    target = targets.start(PROGRAMS / "graph.c")
    res = subprocess.run(
        [*CLI, "scan", str(target.pid), "--format", "collapsed"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 1, res.stderr
    assert res.stderr == ""
