"""Frames in objects the target has dlclose'd since it stored them.

The shim records every object the loader loads (its path, load bias, PT_LOAD
span and build-id; abi.h struct ur_module_table) before it stores a new
backtrace, and keeps the record after the object is unloaded. A pc in no
mapping of the target is looked up there; the file, still on disk, then
stands in for the mapping it had: its PT_LOAD segment holding the pc, placed
at the recorded bias, exactly as the loader had mapped it. A file whose
build-id is not the recorded one (rebuilt since) is not used.

The record is the target's memory, which it may have written anything into:
a path is used only when it is absolute and normal (no "." or ".."
components) and names a regular file the target's file-system user could
read by its mode bits, so a scan never shows a target symbols of files it
could not open itself.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

from unreachable import _native
from unreachable.process.maps import Mapping
from unreachable.process.memory import Memory, memory_reader
from unreachable.symbolize.elf_file import NotElf, read_elf

_MAX_PATH = 4096


@dataclass(frozen=True, slots=True)
class LoadedObject:
    """An object the shim saw loaded, with its address range and build-id."""

    path: str
    bias: int
    start: int
    end: int
    build_id: str  # hex, "" when the object had none


def read_loaded_objects(memory: Memory, descriptor_addr: int) -> list[LoadedObject]:
    """Every object the shim recorded, oldest first; [] when it keeps no record
    (no backtraces, an older shim) or the record cannot be read."""
    try:
        with memory_reader(memory) as read:
            at, size = _native.abi_field("ur_descriptor", "modules")
            table_addr = int.from_bytes(read(descriptor_addr + at, size), "little")
            if not table_addr:
                return []
            table = _native.abi_decode(
                "ur_module_table", read(table_addr, _native.abi_sizeof("ur_module_table"))
            )
            count = min(table["count"], table["capacity"])
            raw = read(table["modules"], count * _native.abi_sizeof("ur_module")) if count else b""
            out = []
            for m in _native.abi_decode_array("ur_module", raw):
                path_at, path_len = m["path"], m["path_len"]
                if path_at + path_len > table["strings_size"] or path_len > _MAX_PATH:
                    continue
                path = read(table["strings"] + path_at, path_len).decode(errors="replace")
                build_id = m["build_id"][: m["build_id_len"]].hex()
                out.append(LoadedObject(path, m["bias"], m["start"], m["end"], build_id))
            return out
    except (OSError, ValueError):
        return []


class UnloadedObjects:
    """Mappings standing in for the recorded objects' segments, by pc."""

    def __init__(self, objects: list[LoadedObject], root: str, pid: int | None) -> None:
        # The newest record first: an address reused by a later object names it.
        # A target that is gone has no credentials to check files against.
        self._objects = list(reversed(objects)) if pid else []
        self._root = root
        self._pid = pid
        self._loads: dict[LoadedObject, list[Mapping] | None] = {}

    def mapping_for(self, pc: int) -> Mapping | None:
        for obj in self._objects:
            if obj.start <= pc < obj.end:
                for m in self._mappings(obj) or ():
                    if m.start <= pc < m.end:
                        return m
                return None
        return None

    def _mappings(self, obj: LoadedObject) -> list[Mapping] | None:
        if obj not in self._loads:
            usable = self._pid is not None and _may_read(self._pid, obj.path, self._root)
            self._loads[obj] = _segments(obj, self._root) if usable else None
        return self._loads[obj]


def _credentials(pid: int) -> tuple[int, set[int]] | None:
    """The target's file-system uid and its groups (/proc/PID/status)."""
    try:
        with open(f"/proc/{pid}/status", errors="surrogateescape") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
        fsuid = int(fields["Uid"].split()[3])
        gids = {int(fields["Gid"].split()[3]), *map(int, fields.get("Groups", "").split())}
    except (OSError, KeyError, IndexError, ValueError):
        return None
    return fsuid, gids


def _may_read(pid: int, path: str, root: str) -> bool:
    if not path.startswith("/") or os.path.normpath(path) != path or "\0" in path:
        return False
    creds = _credentials(pid)
    try:
        st = os.stat(f"{root}{path}")
    except OSError:
        return False
    if creds is None or not stat.S_ISREG(st.st_mode):
        return False
    uid, gids = creds
    if uid == 0:
        return True
    if st.st_uid == uid:
        return bool(st.st_mode & stat.S_IRUSR)
    if st.st_gid in gids:
        return bool(st.st_mode & stat.S_IRGRP)
    return bool(st.st_mode & stat.S_IROTH)


def _segments(obj: LoadedObject, root: str) -> list[Mapping] | None:
    """The object's PT_LOAD segments as the loader mapped them (page-aligned)."""
    try:
        image = read_elf(f"{root}{obj.path}")
    except (OSError, NotElf, ValueError):
        return None
    if obj.build_id and image.build_id and image.build_id != obj.build_id:
        return None  # another file under that name now
    page = os.sysconf("SC_PAGE_SIZE")
    out = []
    for seg in image.loads:
        start = (obj.bias + seg.vaddr) & ~(page - 1)
        end = -(-(obj.bias + seg.vaddr + seg.memsz) // page) * page
        out.append(Mapping(start, end, "r-xp", seg.offset & ~(page - 1), 0, obj.path))
    return out
