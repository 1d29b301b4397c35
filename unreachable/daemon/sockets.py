"""Unix sockets created with their final mode and group, in directories no one else controls.

A socket file is only ever touched by bind(): the mode comes from the umask and
the group from the effective gid in force during bind, so nothing follows the
path afterwards (a chmod or chown of the path would follow a symlink that
another user swapped in between, and change a file of theirs choosing). The
directory must also be safe, as sshd's StrictModes demands of ~/.ssh: owned by
root or by the daemon's user and not writable by anyone else (sticky
directories such as /tmp excepted: there others cannot remove or rename our
entries), and so must every directory above it. The path is resolved once and
the resolved path is what gets bound, so a symlink cannot redirect it later.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator

from unreachable.daemon.config import ConfigError


def safe_socket_path(path: str, what: str) -> str:
    """`path` with its directory created if missing and resolved; ConfigError if unsafe."""
    directory, name = os.path.split(os.path.abspath(path))
    # What exists is checked before anything is created in it: root makes no
    # directory where another user's symlink points.
    existing = directory
    while not os.path.isdir(existing):
        existing = os.path.dirname(existing)
    _refuse_others(os.path.realpath(existing), directory, what)
    try:
        os.makedirs(directory, mode=0o755, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"cannot create {directory} for the {what}: {e.strerror or e}") from None
    directory = os.path.realpath(directory)
    _refuse_others(directory, directory, what)
    return os.path.join(directory, name)


def _refuse_others(component: str, directory: str, what: str) -> None:
    """ConfigError unless component and every directory above it are safe."""
    me = os.geteuid()
    while True:
        st = os.stat(component)
        if st.st_uid not in (0, me):
            raise ConfigError(
                f"refusing to put the {what} in {directory}: {component} belongs to uid "
                f"{st.st_uid}, who could replace the socket (use a directory owned by root)"
            )
        writable = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        if writable and not st.st_mode & stat.S_ISVTX:
            who = "its group" if writable == stat.S_IWGRP else "other users"
            raise ConfigError(
                f"refusing to put the {what} in {directory}: {component} is writable by {who} "
                f"(mode {stat.S_IMODE(st.st_mode):04o}), who could replace the socket "
                f"(chmod go-w {component}, or use another directory)"
            )
        if component == "/":
            return
        component = os.path.dirname(component)


@contextlib.contextmanager
def created_as(mode: int, gid: int = -1) -> Iterator[None]:
    """Files created inside get `mode` (bits 0777) and, when gid >= 0, that group.

    The umask and the effective gid are per process: this is for startup,
    before any work runs that creates files of its own."""
    old_umask = os.umask(0o777 & ~mode)
    old_gid = os.getegid()
    try:
        if gid >= 0 and gid != old_gid:
            try:
                os.setegid(gid)
            except PermissionError:
                raise ConfigError(
                    f"cannot create the socket with group {gid}: only root may (CAP_SETGID); "
                    "otherwise give its directory that group and the setgid bit (chmod g+s)"
                ) from None
        yield
    finally:
        if os.getegid() != old_gid:
            os.setegid(old_gid)
        os.umask(old_umask)
