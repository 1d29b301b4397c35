"""Secure-execution mode: where the dynamic loader ignores LD_PRELOAD.

A program that gains privileges as it starts (set-user-ID or set-group-ID
to someone else, file capabilities) runs with AT_SECURE set, and ld.so
then drops every LD_PRELOAD entry with a slash in it (ld.so(8)). Such a
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
