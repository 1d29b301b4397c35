"""A forked child that installs an allowlist of its own calls before its
first allocation (vsftpd's seccomp_sandbox: its pre-login child) must not be
killed by the shim: the helper, not yet started in the child, was started at
that allocation, and starting a thread made calls the allowlist kills on
(rt_sigprocmask first). No helper is started under a filter the program made
(native/shim/sandbox.c, helper.c)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.cbuild import build
from unreachable._paths import shim_path

PROGRAM = Path(__file__).resolve().parent / "programs" / "sandboxed_child.c"


@pytest.mark.parametrize("route", ["prctl", "syscall"])
def test_a_child_sandboxed_before_its_first_allocation_lives(route):
    exe = build(PROGRAM)
    plain = subprocess.run([str(exe), route], capture_output=True, text=True, timeout=60)
    assert plain.returncode == 0, plain.stdout  # the program itself is correct
    shimmed = subprocess.run(
        [str(exe), route],
        capture_output=True,
        text=True,
        timeout=60,
        env={"LD_PRELOAD": shim_path()},
    )
    assert shimmed.stdout == "ok\nchild exited 0\n", shimmed.stderr
    assert shimmed.returncode == 0
