"""Namespace calls the kernel grants only to a process of one thread: under
the shim (whose helper is a second thread) they must do what they do
without it (native/shim/namespaces.c)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.shim.support import program, run, run_ok

CALLS = ["setns mnt", "setns any", "setns time", "setns mnt in a vfork child", "unshare user"]


def test_namespace_calls_as_without_the_shim(shim: Path) -> None:
    exe = program("namespaces.c")
    alone = run_ok(exe, shim=None)
    if "unshare user: ok" not in alone:
        pytest.skip(f"no user namespaces here: {alone.strip()}")
    under = run_ok(exe, "shim", shim=shim)
    assert under == alone
    assert [line.split(":")[0] for line in under.splitlines()[:-1]] == CALLS


@pytest.mark.parametrize("options", ["", "backtrace=8 guard"])
def test_unshare_and_nsenter_tools(shim: Path, options: str) -> None:
    """util-linux's unshare and nsenter, as a wrapper script would run them."""
    tools = shutil.which("unshare"), shutil.which("nsenter")
    if not all(tools):
        pytest.skip("util-linux's unshare/nsenter not installed")
    if subprocess.run([tools[0], "-U", "true"], capture_output=True).returncode != 0:
        pytest.skip("no user namespaces here")
    own_mounts = [tools[1], "-t", str(os.getpid()), "-m", "true"]
    for cmd in ([tools[0], "-U", "-r", "id", "-u"], own_mounts):
        done = run(Path(cmd[0]), *cmd[1:], shim=shim, options=options)
        assert done.returncode == 0, done.stderr
        assert "unreachable:" not in done.stderr
