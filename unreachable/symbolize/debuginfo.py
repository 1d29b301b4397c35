"""Find the separate debug file of an ELF object, in gdb's search order.

1. By build-id, in every global debug directory:
   ``<dir>/.build-id/ab/cdef....debug`` (the candidate's build-id must match).
2. By ``.gnu_debuglink`` (the candidate's CRC32 must match the link's):
   ``<objdir>/<link>``, ``<objdir>/.debug/<link>``, then ``<dir>/<objdir>/<link>``
   for every global debug directory.

For a process in a container, every candidate is first looked up inside its
root (``/proc/PID/root``), then, for the global directories, on the host.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from unreachable.symbolize.elf_file import ElfImage, NotElf, file_crc32, read_elf


@dataclass(frozen=True, slots=True)
class DebugFile:
    path: str
    image: ElfImage
    how: str  # "build-id" or "debuglink"


@lru_cache(maxsize=256)
def _crc(path: str, dev: int, ino: int, size: int, mtime_ns: int) -> int:
    del dev, ino, size, mtime_ns  # cache key only
    return file_crc32(path)


def _crc_of(path: str) -> int | None:
    try:
        st = os.stat(path)
        return _crc(path, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    except OSError:
        return None


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _open(path: str) -> ElfImage | None:
    try:
        return read_elf(path)
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
    image: ElfImage, obj_path: str, dirs: Sequence[str], root: str = ""
) -> DebugFile | None:
    """The separate debug file of `image` (opened at image.path, known as obj_path)."""
    if image.build_id:
        for cand in build_id_candidates(image.build_id, dirs, root):
            if not os.path.isfile(cand) or _same_file(cand, image.path):
                continue
            dbg = _open(cand)
            if dbg is not None and dbg.build_id == image.build_id:
                return DebugFile(cand, dbg, "build-id")
    if image.debuglink:
        link, crc = image.debuglink
        for cand in debuglink_candidates(obj_path, link, dirs, root):
            if not os.path.isfile(cand) or _same_file(cand, image.path):
                continue
            if _crc_of(cand) != crc:
                continue  # a stale or foreign file of the same name
            dbg = _open(cand)
            if dbg is not None:
                return DebugFile(cand, dbg, "debuglink")
    return None
