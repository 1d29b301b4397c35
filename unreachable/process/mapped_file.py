"""Which file to open for a file mapping of a running process.

A long-running process may map a file that has since been replaced (a
package upgrade writes a new file under the old name) or deleted. Its path
then names another file, or none; the mapping itself still holds the file
the process runs, reachable through /proc/PID/map_files, which the kernel
opens only for CAP_SYS_ADMIN (or CAP_CHECKPOINT_RESTORE).
"""

from __future__ import annotations

import os
from typing import NamedTuple

from unreachable.process.maps import Mapping

DELETED = " (deleted)"


def mapped_path(m: Mapping) -> str:
    """The mapping's path as the process opened it, without " (deleted)"."""
    return m.path[: -len(DELETED)] if m.path.endswith(DELETED) else m.path


class MappedFile(NamedTuple):
    path: str  # the path to open
    exact: bool  # whether it named the file mapped when looked at
    # (device, inode) the file opened must have (files.check_mapped): the path
    # is the target's, which its user can rename another file over at any
    # time after this look. None: the kernel's own link, or no live process.
    mapped: tuple[int, int] | None


def fs_root(pid: int) -> str:
    """The prefix under which pid's paths name its files: "" where they name
    this process's (the same mount namespace and root), else /proc/PID/root.
    A container's root is often "/" too (unshare --mount, a pivot_root'ed
    namespace seen from inside), so the root's path alone does not tell: its
    mounts (an overlay over /usr, a bind mount) give the same paths other files."""
    root = f"/proc/{pid}/root"
    try:
        same = os.stat(f"/proc/{pid}/ns/mnt").st_ino == os.stat("/proc/self/ns/mnt").st_ino
        return "" if same and os.path.realpath(root) == "/" else root
    except OSError:
        return root


def file_for(pid: int | None, m: Mapping, root: str) -> MappedFile:
    """The file to open for m. root prefixes the mapping's path
    (/proc/PID/root for another mount namespace, or ""). When the path no
    longer names the mapped file, the mapping's own entry in
    /proc/PID/map_files stands in; if that cannot be read either, the stale
    path comes back with exact False (and a `mapped` no file there has)."""
    full = f"{root}{mapped_path(m)}"
    mapped = (m.dev, m.inode) if pid and m.inode and m.dev else None
    stale = m.path.endswith(DELETED)
    if not stale and m.inode:
        try:
            st = os.stat(full)
        except OSError:
            stale = True
        else:
            # Not the device: overlayfs and btrfs subvolumes stat another
            # than the maps give (files.check_mapped asks the kernel).
            stale = st.st_ino != m.inode
    if not stale:
        return MappedFile(full, True, mapped)
    if pid:
        link = f"/proc/{pid}/map_files/{m.start:x}-{m.end:x}"
        if os.access(link, os.R_OK):
            return MappedFile(link, True, None)
    return MappedFile(full, False, mapped)
