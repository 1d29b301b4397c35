"""The injected fork's snapshot child of a target in a pid namespace of its
own (a container's process, or its init) is reaped, not left a zombie.

The stopper learns the child's pid in its own namespace; the target knows
it by another. The reap injected into the target must wait for the pid the
target knows, or it finds no such child and the zombie stays, one more
with every scan (pid 1 of a booted systemd kept one per scan)."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.scanner.procs import children, state
from tests.support.cbuild import build
from unreachable.process.status import innermost_pid, read_status

PROGRAM = Path(__file__).parent / "programs" / "injected_target.c"
CLI = [sys.executable, "-m", "unreachable.cli.main"]

pytestmark = pytest.mark.skipif(os.uname().machine != "x86_64", reason="x86-64 injection")


def test_a_target_in_its_own_pid_namespace_keeps_no_zombie():
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("a pid namespace needs root and unshare(1)")
    exe = build(PROGRAM)
    # The program is pid 1 of the new namespace, as a container's init is.
    proc = subprocess.Popen(
        ["unshare", "--pid", "--fork", "--kill-child", str(exe), "read"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdin is not None and proc.stdout is not None
        assert proc.stdout.readline().startswith("READY")
        (pid,) = children(proc.pid)
        assert innermost_pid(pid) == 1
        for _ in range(3):
            res = subprocess.run([*CLI, "scan", str(pid), "--json"], capture_output=True, text=True)
            assert res.returncode == 1, res.stderr
            report = json.loads(res.stdout)
            assert (report["snapshot"], report["leak_count"]) == ("fork", 3), report
            assert children(pid) == []
        assert state(pid) in "SR" and read_status(pid).tracer_pid == 0
        proc.stdin.write("status\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == f"STATUS sigchld=0 wait=-1 errno={errno.ECHILD}"
    finally:
        proc.kill()
        proc.wait(timeout=10)
