"""Which file to open for a file mapping of a running process.

A long-running process may map a file that has since been replaced (a
package upgrade writes a new file under the old name) or deleted. Its path
then names another file, or none; the mapping itself still holds the file
the process runs, reachable through /proc/PID/map_files, which the kernel
opens only for CAP_SYS_ADMIN (or CAP_CHECKPOINT_RESTORE).
"""

from __future__ import annotations

import os

from unreachable.process.maps import Mapping

DELETED = " (deleted)"


def mapped_path(m: Mapping) -> str:
    """The mapping's path as the process opened it, without " (deleted)"."""
    return m.path[: -len(DELETED)] if m.path.endswith(DELETED) else m.path


def file_for(pid: int | None, m: Mapping, root: str) -> tuple[str, bool]:
    """(the path to open, whether it is the file mapped). root prefixes the
    mapping's path (/proc/PID/root for another mount namespace, or ""). When
    the path no longer names the mapped file, the mapping's own entry in
    /proc/PID/map_files stands in; if that cannot be read either, the stale
    path comes back with False."""
    full = f"{root}{mapped_path(m)}"
    stale = m.path.endswith(DELETED)
    if not stale and m.inode:
        try:
            stale = os.stat(full).st_ino != m.inode
        except OSError:
            stale = True
    if not stale:
        return full, True
    if pid:
        mapped = f"/proc/{pid}/map_files/{m.start:x}-{m.end:x}"
        if os.access(mapped, os.R_OK):
            return mapped, True
    return full, False
