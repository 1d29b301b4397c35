"""Throwaway local users for multi-user tests (root only): created for one
test with useradd, removed with userdel afterwards."""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest


@dataclass(frozen=True)
class User:
    name: str
    uid: int
    gid: int

    def demote(self) -> Callable[[], None]:
        """A preexec_fn that runs the child as this user."""

        def run_as() -> None:
            os.setgroups([])
            os.setgid(self.gid)
            os.setuid(self.uid)

        return run_as


@contextmanager
def temp_user(prefix: str = "urtest") -> Iterator[User]:
    if os.geteuid() != 0:
        pytest.skip("creating a user takes root")
    if shutil.which("useradd") is None or shutil.which("userdel") is None:
        pytest.skip("useradd/userdel are not installed")
    name = f"{prefix}{secrets.token_hex(3)}"
    subprocess.run(
        ["useradd", "--system", "--no-create-home", "--user-group", "--shell", "/bin/false", name],
        check=True,
        capture_output=True,
    )
    try:
        pw = pwd.getpwnam(name)
        yield User(name, pw.pw_uid, pw.pw_gid)
    finally:
        subprocess.run(["userdel", name], check=False, capture_output=True)
