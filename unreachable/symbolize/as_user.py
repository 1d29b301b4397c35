"""Pinning files with another user's rights: a heap dump's, read by root.

A live scan reads the files a process maps, and the (device, inode) of each
mapping proves the process had them. A heap dump's MAPS section is text its
writer chose: a user's dump may name a file only root can read, and root's
symbolizer would print that file's function names. So root pins each file a
user's dump names with that user's uid, gid and groups
(`_native.open_as_user`: this thread alone takes them, for the open): the
kernel checks every directory of the path and, for a regular file, its read
permission, ACLs included. The scanner then reads that very inode, which a
rename cannot change.
"""

from __future__ import annotations

import errno
import os
import pwd

from unreachable import _native
from unreachable.symbolize.files import UnsafeFile


def _ids(uid: int) -> tuple[int, list[int]]:
    """(gid, supplementary groups) of a user; a uid without a passwd entry:
    its own number as gid, no groups."""
    try:
        pw = pwd.getpwuid(uid)
    except KeyError:
        return uid, []
    return pw.pw_gid, os.getgrouplist(pw.pw_name, pw.pw_gid)


class UserPinner:
    """pin(path): an O_PATH descriptor of the file at `path` as `uid` opens
    it; UnsafeFile when that user could not read it."""

    def __init__(self, uid: int) -> None:
        self.uid = uid
        self.gid, self.groups = _ids(uid)

    def pin(self, path: str) -> int:
        try:
            return _native.open_as_user(self.uid, self.gid, self.groups, path)
        except OSError as e:
            if e.errno in (errno.EACCES, errno.EPERM):
                raise UnsafeFile(
                    f"{path}: not readable by uid {self.uid}, the heap dump's owner"
                ) from None
            raise
