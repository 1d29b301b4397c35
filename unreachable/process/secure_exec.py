"""Secure-execution mode: where the dynamic loader ignores LD_PRELOAD.

A program that gains privileges as it starts (set-user-ID or set-group-ID
to someone else, file capabilities) runs with AT_SECURE set, and ld.so
then drops every LD_PRELOAD entry with a slash in it (ld.so(8)). So does
any program exec'ed by a process whose real and effective IDs differ:
squid's master, running as root with its real uid set to the proxy user,
starts its kids so. Such a
program started under `unreachable-cli run` runs without the shim, and a
scan of it could only say that the shim is missing; these say why.
"""

from __future__ import annotations

import os
import stat
import struct

AT_SECURE = 23  # <elf.h>
_AUXV_ENTRY = struct.Struct("<QQ")


def runs_secure(pid: int) -> bool:
    """Whether the process was started in secure-execution mode (its auxv's
    AT_SECURE). Unreadable auxv: not known, so False."""
    try:
        with open(f"/proc/{pid}/auxv", "rb") as f:
            data = f.read()
    except OSError:
        return False
    for key, value in _AUXV_ENTRY.iter_unpack(data[: len(data) // 16 * 16]):
        if key == AT_SECURE:
            return bool(value != 0)
    return False


def gains_privileges(path: str) -> str:
    """Why exec'ing path from this process would run it in secure-execution
    mode ("" if it would not, as far as its mode bits and capabilities tell)."""
    try:
        st = os.stat(path)
        nosuid = bool(os.statvfs(path).f_flag & os.ST_NOSUID)
    except OSError:
        return ""
    if not nosuid:
        if st.st_mode & stat.S_ISUID and st.st_uid != os.getuid():
            return "set-user-ID"
        if st.st_mode & stat.S_ISGID and st.st_gid != os.getgid():
            return "set-group-ID"
    if os.getuid() != 0:  # root already holds every capability a file can grant
        try:
            os.getxattr(path, "security.capability")
            return "given file capabilities"
        except OSError:
            pass
    return ""


def why_secure(pid: int) -> str:
    """What put a process that runs_secure into secure-execution mode, and the
    way out: its program's set-ID bits or capabilities, else the IDs it was
    exec'ed with."""
    exe = f"/proc/{pid}/exe"
    try:
        mode = os.stat(exe).st_mode
    except OSError:
        mode = 0
    if mode & stat.S_ISUID:
        return "its program is set-user-ID; run a copy without that bit"
    if mode & stat.S_ISGID:
        return "its program is set-group-ID; run a copy without that bit"
    try:
        os.getxattr(exe, "security.capability")
        return "its program has file capabilities; run a copy without them"
    except OSError:
        pass
    return (
        "it was exec'ed with real and effective user or group IDs that differ"
        " (squid's master starts its kids so), not for its program's mode"
    )
