"""Opening the files symbolization reads: only what cannot stall or fool the scan.

A root scan reads files a user controls: the binaries a user's process maps,
the debug file its ``.gnu_debuglink`` names, paths inside its container's
root. Any of them may be a FIFO (an open or a read that never returns), a
device (opening some has side effects), a sparse file of many GiB (a CRC
that takes minutes, a section read that takes all memory), or a symbolic
link to any of these. So every file is opened in two steps:

1. ``O_PATH``: resolves the path (following links) and pins the inode
   without opening it for I/O, which neither blocks on a FIFO nor wakes a
   device driver;
2. its ``fstat`` must show a regular file, of at most ``max_bytes``, owned
   by one of ``owners`` (None: any owner); only then is that same inode
   opened for reading, through ``/proc/self/fd``.

What is checked is the inode read, not the path, so replacing the file
between the check and the read changes nothing, and where a link points does
not matter. A refused file raises UnsafeFile (an OSError), which callers
treat as "no such file".
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import BinaryIO

# Bigger than any real ELF object or separate debug file short of the very
# largest; anything bigger is refused unread.
MAX_FILE_BYTES = 4 << 30
# One section read into memory at most (symbol and string tables, notes,
# .gnu_debuglink; DWARF goes through pyelftools on the file).
MAX_SECTION_BYTES = 1 << 30


class UnsafeFile(OSError):
    """A file symbolization will not read (and why)."""


class OutOfTime(Exception):
    """The symbolizer's budget ran out during a long read."""


@dataclass(frozen=True, slots=True)
class FilePolicy:
    """Which of the target's files symbolization may open."""

    owners: frozenset[int] | None = None  # None: any owner
    max_bytes: int = MAX_FILE_BYTES
    # Pins a path with another user's rights (as_user.UserPinner.pin: a
    # heap dump's owner's, when root reads it); None: this process's.
    pin: Callable[[str], int] | None = None

    def pinned(self, path: str) -> int:
        """An O_PATH descriptor of the file at `path`, opened as the policy says."""
        if self.pin is not None:
            return self.pin(path)
        return os.open(path, os.O_PATH | os.O_CLOEXEC)

    def check(self, path: str, st: os.stat_result) -> None:
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeFile(f"{path}: not a regular file")
        if self.owners is not None and st.st_uid not in self.owners:
            raise UnsafeFile(f"{path}: owned by uid {st.st_uid}, not by root or the target's user")
        if st.st_size > self.max_bytes:
            raise UnsafeFile(f"{path}: {st.st_size} bytes, over the {self.max_bytes} byte limit")


ANY_OWNER = FilePolicy()


def trusted_owners(*uids: int | None) -> FilePolicy:
    """Files owned by root, by this process's user, or by one of `uids`."""
    return FilePolicy(frozenset({0, os.geteuid(), *(u for u in uids if u is not None)}))


# (device, inode) of the file a process maps, from /proc/PID/maps
# (mapped_file.file_for); None where the path is the kernel's own link to it
# or no process maps it.
Mapped = tuple[int, int] | None


def check_mapped(path: str, pinned: int, st: os.stat_result, mapped: Mapped) -> None:
    """UnsafeFile unless the file pinned (an O_PATH descriptor, stat `st`) is
    the one mapped: a target's user may rename another file over the path
    between the check of its inode and its opening (one only root can read,
    whose symbols would then reach the user's report)."""
    if mapped is None or (st.st_dev, st.st_ino) == mapped:
        return
    # overlayfs stats a file with its layer's device but maps it with the
    # overlay's, as btrfs does with subvolumes: the kernel then says which
    # (device, inode) its maps give this very file.
    if st.st_ino == mapped[1] and stat.S_ISREG(st.st_mode) and _as_mapped(pinned, st) == mapped:
        return
    raise UnsafeFile(f"{path}: not the file the process maps (replaced since it was mapped)")


def _as_mapped(pinned: int, st: os.stat_result) -> tuple[int, int] | None:
    """(device, inode) /proc/self/maps gives for a page of the pinned file
    mapped here, as the target's maps give theirs; None if it cannot be mapped."""
    import ctypes
    import mmap

    if st.st_size == 0:
        return None
    fd = os.open(f"/proc/self/fd/{pinned}", os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY)
    try:
        page = mmap.mmap(fd, min(st.st_size, mmap.PAGESIZE), access=mmap.ACCESS_COPY)
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    try:
        view = ctypes.c_char.from_buffer(page)
        start = f"{ctypes.addressof(view):x}-"
        del view
        with open("/proc/self/maps") as maps:
            for line in maps:
                if line.startswith(start):
                    fields = line.split()
                    major, minor = fields[3].split(":")
                    return os.makedev(int(major, 16), int(minor, 16)), int(fields[4])
        return None
    finally:
        page.close()


def stat_checked(
    path: str, policy: FilePolicy = ANY_OWNER, mapped: Mapped = None
) -> os.stat_result:
    """The stat of the file at `path`, which must pass `policy` and be the
    file mapped, if given (UnsafeFile)."""
    fd = policy.pinned(path)
    try:
        st = os.fstat(fd)
        policy.check(path, st)
        check_mapped(path, fd, st, mapped)
    finally:
        os.close(fd)
    return st


def file_identity(st: os.stat_result) -> tuple[int, ...]:
    """(dev, ino, size, mtime_ns, ctime_ns): which file, as it was then."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def open_checked(
    path: str,
    policy: FilePolicy = ANY_OWNER,
    identity: tuple[int, ...] = (),
    mapped: Mapped = None,
) -> BinaryIO:
    """The file at `path` opened for reading, if it passes `policy` (OSError).
    identity: the file's when it was first read (file_identity); a file
    replaced or written since is refused, so that a target's user cannot
    swap it between the headers' read and a section's. mapped: the
    (device, inode) the process maps (check_mapped)."""
    pinned = policy.pinned(path)
    try:
        st = os.fstat(pinned)
        policy.check(path, st)
        check_mapped(path, pinned, st, mapped)
        if identity and file_identity(st) != identity:
            raise UnsafeFile(f"{path}: replaced or changed since its headers were read")
        fd = os.open(f"/proc/self/fd/{pinned}", os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY)
    finally:
        os.close(pinned)
    return os.fdopen(fd, "rb")


def crc32_checked(path: str, policy: FilePolicy, deadline: float | None = None) -> int:
    """CRC32 of the whole file (gnu_debuglink's checksum); OutOfTime past `deadline`
    (time.monotonic())."""
    import zlib

    crc = 0
    with open_checked(path, policy) as f:
        while chunk := f.read(1 << 20):
            crc = zlib.crc32(chunk, crc)
            if deadline is not None and time.monotonic() > deadline:
                raise OutOfTime(f"{path}: CRC32 not finished within the symbolization budget")
    return crc & 0xFFFFFFFF
