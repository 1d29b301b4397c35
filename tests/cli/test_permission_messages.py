"""`no permission` names the rule that applied, not a remedy that may not help."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from unreachable.process.access import CAP_SYS_PTRACE, YAMA_SCOPE

CLI = [sys.executable, "-m", "unreachable.cli.main"]
NOBODY = 65534


def _has_cap_sys_ptrace() -> bool:
    with open("/proc/self/status") as f:
        caps = next(line for line in f if line.startswith("CapEff:")).split()[1]
    return bool(int(caps, 16) >> CAP_SYS_PTRACE & 1)


def test_another_users_process(tmp_path):
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("running the scanner as another user takes root and setpriv")
    if os.path.exists(YAMA_SCOPE):
        with open(YAMA_SCOPE) as f:
            if f.read().strip() == "3":
                pytest.skip("Yama scope 3 is named first")
    target = subprocess.Popen(["sleep", "600"])
    try:
        # uid nobody, keeping only the right to read this checkout and its
        # interpreter (CAP_DAC_OVERRIDE: not CAP_SYS_PTRACE).
        res = subprocess.run(
            ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
            + ["--inh-caps=+dac_override", "--ambient-caps=+dac_override"]
            + [*CLI, "scan", str(target.pid)],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
        )
    finally:
        target.kill()
        target.wait()
    assert res.returncode == 2
    assert res.stderr == (
        f"unreachable-cli: error: no permission to read the memory map of pid {target.pid}: "
        f"this process (uid {NOBODY}) lacks CAP_SYS_PTRACE, and pid {target.pid} belongs to "
        "uid 0 (run as its user or as root)\n"
    )


def test_pid_1_as_root_says_what_stopped_it():
    if os.geteuid() != 0:
        pytest.skip("the case of root")
    try:
        with open("/proc/1/maps") as f:
            f.read(1)
        pytest.skip("pid 1 is open to this process here")
    except PermissionError:
        pass
    res = subprocess.run([*CLI, "scan", "1"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2
    assert len(res.stderr.splitlines()) == 1, res.stderr
    assert "run as its user or as root" not in res.stderr  # it already does
    prefix = "unreachable-cli: error: no permission to read the memory map of pid 1: "
    if _has_cap_sys_ptrace():
        assert res.stderr.startswith(
            prefix + "the kernel refused although this process runs as root with CAP_SYS_PTRACE"
        ), res.stderr
        assert "pid 1, the init of this pid namespace, is shielded by the kernel" in res.stderr
    else:
        assert res.stderr.startswith(
            prefix + "this process runs as root but without CAP_SYS_PTRACE"
        ), res.stderr
