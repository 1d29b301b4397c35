"""Find the separate debug file of an ELF object, in gdb's search order.

1. By build-id, in every global debug directory:
   ``<dir>/.build-id/ab/cdef....debug`` (the candidate's build-id must match).
2. By ``.gnu_debuglink`` (the candidate's CRC32 must match the link's):
   ``<objdir>/<link>``, ``<objdir>/.debug/<link>``, then ``<dir>/<objdir>/<link>``
   for every global debug directory.

For a process in a container, every candidate is first looked up inside its
root (``/proc/PID/root``), then, for the global directories, on the host.

Every candidate is opened under the caller's FilePolicy
(unreachable.symbolize.files): a regular file of a trusted owner and a sane
size, or it is skipped (and the reason added to `refused`). The CRC32 of a
debuglink candidate reads the whole file, so it stops at the caller's
deadline (OutOfTime).
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from unreachable.symbolize.elf_file import ElfImage, NotElf, read_elf
from unreachable.symbolize.files import (
    ANY_OWNER,
    FilePolicy,
    UnsafeFile,
    crc32_checked,
    stat_checked,
)


@dataclass(frozen=True, slots=True)
class DebugFile:
    path: str
    image: ElfImage
    how: str  # "build-id" or "debuglink"


_crcs: OrderedDict[tuple[str, int, int, int, int], int] = OrderedDict()


def _crc_of(path: str, policy: FilePolicy, deadline: float | None) -> int:
    """The file's CRC32, remembered by its identity (OSError, OutOfTime)."""
    st = stat_checked(path, policy)
    key = (path, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    if key in _crcs:
        _crcs.move_to_end(key)
        return _crcs[key]
    crc = _crcs[key] = crc32_checked(path, policy, deadline)
    while len(_crcs) > 256:
        _crcs.popitem(last=False)
    return crc


def _usable(path: str, policy: FilePolicy, refused: list[str] | None) -> bool:
    try:
        stat_checked(path, policy)
    except UnsafeFile as e:
        if refused is not None:
            refused.append(str(e))
        return False
    except OSError:
        return False
    return True


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _open(path: str, policy: FilePolicy) -> ElfImage | None:
    try:
        return read_elf(path, policy)
    except (OSError, NotElf, ValueError):
        return None


def build_id_candidates(build_id: str, dirs: Sequence[str], root: str) -> list[str]:
    if len(build_id) < 4:
        return []
    rel = os.path.join(".build-id", build_id[:2], build_id[2:] + ".debug")
    out = []
    for d in dirs:
        if root:
            out.append(root + os.path.join(d, rel))
        out.append(os.path.join(d, rel))
    return out


def debuglink_candidates(obj_path: str, link: str, dirs: Sequence[str], root: str) -> list[str]:
    """obj_path is the object's path inside its root (as /proc/PID/maps shows it)."""
    if not link or "/" in link:
        return []
    objdir = os.path.dirname(obj_path)
    out = [root + os.path.join(objdir, link), root + os.path.join(objdir, ".debug", link)]
    for d in dirs:
        inner = os.path.join(d, objdir.lstrip("/"), link)
        if root:
            out.append(root + inner)
        out.append(inner)
    return out


def find_debug_file(
    image: ElfImage,
    obj_path: str,
    dirs: Sequence[str],
    root: str = "",
    policy: FilePolicy = ANY_OWNER,
    deadline: float | None = None,
    refused: list[str] | None = None,
) -> DebugFile | None:
    """The separate debug file of `image` (opened at image.path, known as obj_path).
    OutOfTime when a CRC32 runs past `deadline` (time.monotonic())."""
    if image.build_id:
        for cand in build_id_candidates(image.build_id, dirs, root):
            if not _usable(cand, policy, refused) or _same_file(cand, image.path):
                continue
            dbg = _open(cand, policy)
            if dbg is not None and dbg.build_id == image.build_id:
                return DebugFile(cand, dbg, "build-id")
    if image.debuglink:
        link, crc = image.debuglink
        for cand in debuglink_candidates(obj_path, link, dirs, root):
            if not _usable(cand, policy, refused) or _same_file(cand, image.path):
                continue
            try:
                if _crc_of(cand, policy, deadline) != crc:
                    continue  # a stale or foreign file of the same name
            except OSError:
                continue
            dbg = _open(cand, policy)
            if dbg is not None:
                return DebugFile(cand, dbg, "debuglink")
    return None
