"""Secure-execution mode, told from the process (auxv) and from the file
about to be exec'ed (mode bits)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time

from tests.support.setid import setgid_sleep
from unreachable.process.secure_exec import gains_privileges, runs_secure


def test_a_plain_process_is_not_secure():
    assert runs_secure(os.getpid()) is False
    assert gains_privileges(shutil.which("sleep") or "/bin/sleep") == ""


def test_a_set_group_id_program_is(tmp_path):
    exe = setgid_sleep(tmp_path)
    assert gains_privileges(str(exe)) == "set-group-ID"
    proc = subprocess.Popen([str(exe), "30"])
    try:
        deadline = time.monotonic() + 10
        while not runs_secure(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.01)  # auxv is the exec'ed program's once exec is done
        assert runs_secure(proc.pid)
    finally:
        proc.kill()
        proc.wait()


def test_a_process_that_is_gone_is_not_known_secure():
    proc = subprocess.Popen(["true"])
    proc.wait()
    assert runs_secure(proc.pid) is False
