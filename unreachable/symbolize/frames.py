"""Symbolize backtraces against a process's memory map (after the target is released).

Every frame gets its map path, its relative pc (the link-time address in
that ELF file, what addr2line and the symbol tables use), the demangled
function and the offset into it, and file:line where DWARF exists (in the
object itself or in a separate debug file found by build-id or debuglink).
Files are opened through /proc/PID/root while the process exists, so
processes in containers resolve against their own files.

The files are the target's, so possibly a hostile user's: each is opened
only if it is a regular file of sane size owned by root, by this process's
user or by the target's (unreachable.symbolize.files), and one symbolization
stops opening and reading files when its time budget runs out. Frames left
out keep their map and file offset, and `note` says what was left out and why.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING

from unreachable.process.mapped_file import file_for, fs_root, mapped_path
from unreachable.process.maps import Mapping, find_mapping
from unreachable.symbolize.config import SymbolConfig, default_symbol_budget
from unreachable.symbolize.files import OutOfTime, trusted_owners
from unreachable.symbolize.frame import Frame
from unreachable.symbolize.unloaded import LoadedObject, UnloadedObjects

if TYPE_CHECKING:
    from unreachable.symbolize.objects import SymbolObject


def _objects() -> ModuleType:
    """The ELF and DWARF readers, imported when a frame is first resolved:
    every report type imports Frame, and a scan without backtraces never
    opens an object (their imports were a tenth of the CLI's start-up)."""
    from unreachable.symbolize import objects

    return objects


class Symbolizer:
    """Resolves pcs of one process; call after the target has been released.

    pid: the process, when it still exists (files are then opened through
    /proc/PID/root, and /proc/PID/map_files when a mapped file was replaced
    or deleted); None or a gone pid: plain paths (heap dumps, exited targets).
    root: override the file-system root prefix (tests, offline sysroots).
    cache_dir / debug_dirs: override SymbolConfig.from_env().
    unloaded: the objects the shim recorded (symbolize.unloaded), for pcs in
    objects dlclose'd since.
    trust_uids: owners whose files are read besides root, this process's user
    and the live target's user (a heap dump file's owner, say).
    as_user: the user whose rights every file is opened with, when this
    process is root and that user is not (a heap dump's owner: its MAPS is
    text the user wrote, which may name files only root can read).
    budget: seconds each symbolize call may spend on files (None: no limit;
    default UNREACHABLE_SYMBOL_BUDGET, or 30).
    """

    def __init__(
        self,
        pid: int | None,
        mappings: list[Mapping],
        *,
        root: str | None = None,
        cache_dir: str | None | bool = True,
        debug_dirs: Sequence[str] | None = None,
        unloaded: Sequence[LoadedObject] = (),
        trust_uids: Sequence[int] = (),
        as_user: int | None = None,
        budget: float | None | bool = True,
    ) -> None:
        self._pid = pid if pid and os.path.isdir(f"/proc/{pid}") else None
        self._policy = trusted_owners(_owner_of(self._pid), *trust_uids)
        if as_user not in (None, 0) and os.geteuid() == 0:
            from unreachable.symbolize.as_user import UserPinner

            self._policy = dataclasses.replace(self._policy, pin=UserPinner(as_user).pin)
        self._budget = default_symbol_budget() if budget is True else (budget or None)
        self._deadline: float | None = None
        self._refused: list[str] = []
        self._left_raw = 0
        self.note = ""  # what the last symbolize call left out and why ("" if nothing)
        if root is None:
            # Plain paths where they name the target's files give nicer cache keys.
            root = fs_root(self._pid) if self._pid else ""
        self._root = root.rstrip("/")
        env = SymbolConfig.from_env()
        self._config = SymbolConfig(
            env.cache_dir if cache_dir is True else (cache_dir or None),
            tuple(debug_dirs) if debug_dirs is not None else env.debug_dirs,
        )
        self._maps = sorted(mappings, key=lambda m: m.start)
        self._unloaded = UnloadedObjects(list(unloaded), self._root, self._pid)
        self._objects: dict[Mapping, SymbolObject | None] = {}

    def _object(self, m: Mapping) -> SymbolObject | None:
        if m not in self._objects:
            file = file_for(self._pid, m, self._root)
            self._objects[m] = _objects().get_object(
                file.path,
                mapped_path(m),
                self._root,
                self._config,
                self._policy,
                self._deadline,
                self._refused,
                file.mapped,
            )
        return self._objects[m]

    def _out_of_time(self) -> bool:
        return self._deadline is not None and time.monotonic() > self._deadline

    def _start(self) -> None:
        self._deadline = time.monotonic() + self._budget if self._budget else None
        self._refused = []
        self._left_raw = 0

    def _finish(self, total: int) -> None:
        notes = []
        if self._left_raw:
            notes.append(
                f"{self._left_raw} of {total} frames left unsymbolized: the symbolization "
                f"budget ({self._budget:g} s, UNREACHABLE_SYMBOL_BUDGET) ran out"
            )
        refused = list(dict.fromkeys(self._refused))
        if refused:
            more = f" and {len(refused) - 3} more" if len(refused) > 3 else ""
            notes.append("files not read: " + "; ".join(refused[:3]) + more)
        self.note = "; ".join(notes)

    def symbolize(self, stacks: dict[int, tuple[int, ...]]) -> dict[int, list[Frame]]:
        pcs = {pc for stack in stacks.values() for pc in stack}
        self._start()
        with _objects()._lock:
            frames = self._resolve(pcs)
        self._finish(len(pcs))
        return {sid: [frames[pc] for pc in stack] for sid, stack in stacks.items()}

    def resolve(self, pcs: set[int]) -> dict[int, Frame]:
        """pc -> frame, one Frame per distinct pc (what big heap dumps share)."""
        self._start()
        with _objects()._lock:
            frames = self._resolve(pcs)
        self._finish(len(pcs))
        return frames

    def symbolize_pcs(self, pcs: Sequence[int]) -> list[Frame]:
        self._start()
        with _objects()._lock:
            frames = self._resolve(set(pcs))
        self._finish(len(set(pcs)))
        return [frames[pc] for pc in pcs]

    def _resolve(self, pcs: set[int]) -> dict[int, Frame]:
        out: dict[int, Frame] = {}
        fresh: list[tuple[int, Mapping, SymbolObject, int, tuple[str, int, str, int]]] = []
        touched: set[int] = set()
        for pc in pcs:
            m = find_mapping(self._maps, pc) or self._unloaded.mapping_for(pc)
            if m is None:
                out[pc] = Frame(pc, "", pc, "", 0)
                continue
            if not m.path.startswith("/"):
                out[pc] = Frame(pc, m.path, pc - m.start, "", 0)
                continue
            raw_frame = Frame(pc, m.path, pc - m.start + m.offset, "", 0)
            if m not in self._objects and self._out_of_time():
                self._left_raw += 1
                out[pc] = raw_frame
                continue
            try:
                obj = self._object(m)
            except OutOfTime:
                self._objects[m] = obj = None
                self._left_raw += 1
                out[pc] = raw_frame
                continue
            if obj is None:
                out[pc] = raw_frame
                continue
            touched.add(id(obj))
            vaddr = obj.image.file_offset_to_vaddr(pc - m.start + m.offset)
            hit = obj.resolved.get(vaddr)
            if hit is not None:
                out[pc] = Frame(pc, m.path, vaddr, *hit)
                continue
            if self._out_of_time():
                self._left_raw += 1
                out[pc] = Frame(pc, m.path, vaddr, "", 0)
                continue
            try:
                raw = obj.lookup_raw(vaddr)
            except Exception:  # noqa: BLE001 - a bad ELF must not fail a report
                raw = ("", 0, "", 0)
            fresh.append((pc, m, obj, vaddr, raw))
        if fresh:
            from unreachable.symbolize.demangle import demangle_all

            names = demangle_all({raw[0] for *_, raw in fresh if raw[0]})
            for pc, m, obj, vaddr, (fn, off, file, line) in fresh:
                value = (names.get(fn, fn), off, file, line)
                obj.remember(vaddr, value)
                out[pc] = Frame(pc, m.path, vaddr, *value)
        for obj in {id(o): o for o in self._objects.values() if o is not None}.values():
            if id(obj) in touched:
                obj.flush()
        return out


def _owner_of(pid: int | None) -> int | None:
    """The user a live process runs as (/proc/PID's owner: its effective uid,
    root's for a process that is not dumpable)."""
    if pid is None:
        return None
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None
