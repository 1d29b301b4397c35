"""A real unprivileged user made for one test (useradd), removed after it (userdel)."""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

SYSTEM_PYTHON = "/usr/bin/python3"


@dataclass(frozen=True)
class User:
    name: str
    uid: int
    gid: int

    def run(self, *argv: str, **kw) -> subprocess.Popen[str]:
        """argv as this user (no supplementary groups), started now."""
        cmd = ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups", *argv]
        return subprocess.Popen(cmd, text=True, **kw)

    def python(self, code: str, *args: str, **kw) -> subprocess.Popen[str]:
        # The system's python: this checkout, its venv and root's home are not
        # this user's to read. -I: nothing from the environment either.
        return self.run(SYSTEM_PYTHON, "-I", "-c", code, *args, **kw)


def _exists(name: str) -> bool:
    return subprocess.run(["getent", "passwd", name], capture_output=True).returncode == 0


def unprivileged_user(tag: str) -> Iterator[User]:
    if os.geteuid() != 0:
        pytest.skip("making a user takes root")
    for tool in ("useradd", "userdel", "setpriv", SYSTEM_PYTHON):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")
    name = f"ur{tag}{os.getpid() % 100000}"
    subprocess.run(
        ["useradd", "--no-create-home", "--user-group", "--shell", "/usr/sbin/nologin", name],
        check=True,
        capture_output=True,
    )
    try:
        pw = pwd.getpwnam(name)
        assert grp.getgrgid(pw.pw_gid).gr_name == name
        yield User(name, pw.pw_uid, pw.pw_gid)
    finally:
        subprocess.run(["userdel", name], capture_output=True)
        assert not _exists(name), f"user {name} left behind"
