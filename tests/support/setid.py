"""A set-group-ID copy of sleep(1): a program the dynamic loader starts in
secure-execution mode, ignoring LD_PRELOAD (unreachable/process/secure_exec.py)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

NOGROUP = 65534


def setgid_sleep(directory: Path) -> Path:
    """The copy, or the test skipped where one cannot be made to count."""
    if os.getuid() != 0:
        pytest.skip("making a set-group-ID program for another group takes root")
    if os.statvfs(directory).f_flag & os.ST_NOSUID:
        pytest.skip(f"{directory} is mounted nosuid")
    exe = directory / "sleep-setgid"
    shutil.copy(shutil.which("sleep") or "/bin/sleep", exe)
    os.chown(exe, 0, NOGROUP)
    os.chmod(exe, 0o2755)  # after chown, which clears the set-ID bits
    return exe
