"""Symbolize backtraces against a process's memory map (after the target is released).

Every frame gets its map path, its relative pc (the link-time address in
that ELF file, what addr2line and the symbol tables use), the demangled
function and the offset into it, and file:line where DWARF exists (in the
object itself or in a separate debug file found by build-id or debuglink).
Files are opened through /proc/PID/root while the process exists, so
processes in containers resolve against their own files.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from dataclasses import dataclass

from unreachable.process.mapped_file import file_for, mapped_path
from unreachable.process.maps import Mapping, find_mapping
from unreachable.symbolize import objects
from unreachable.symbolize.config import SymbolConfig
from unreachable.symbolize.demangle import demangle_all
from unreachable.symbolize.objects import SymbolObject
from unreachable.symbolize.unloaded import LoadedObject, UnloadedObjects


@dataclass(frozen=True, slots=True)
class Frame:
    pc: int
    map: str
    rel_pc: int
    function: str
    offset: int
    file: str = ""
    line: int = 0


def frame_to_dict(frame: Frame) -> dict[str, int | str]:
    """A frame as JSON reports, heap dumps and diffs write it."""
    return dataclasses.asdict(frame)


class Symbolizer:
    """Resolves pcs of one process; call after the target has been released.

    pid: the process, when it still exists (files are then opened through
    /proc/PID/root, and /proc/PID/map_files when a mapped file was replaced
    or deleted); None or a gone pid: plain paths (heap dumps, exited targets).
    root: override the file-system root prefix (tests, offline sysroots).
    cache_dir / debug_dirs: override SymbolConfig.from_env().
    unloaded: the objects the shim recorded (symbolize.unloaded), for pcs in
    objects dlclose'd since.
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
    ) -> None:
        self._pid = pid if pid and os.path.isdir(f"/proc/{pid}") else None
        if root is None:
            root = f"/proc/{self._pid}/root" if self._pid else ""
            if root and os.path.realpath(root) == "/":
                root = ""  # same mount namespace root: plain paths give nicer cache keys
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
            path, _ = file_for(self._pid, m, self._root)
            self._objects[m] = objects.get_object(path, mapped_path(m), self._root, self._config)
        return self._objects[m]

    def symbolize(self, stacks: dict[int, tuple[int, ...]]) -> dict[int, list[Frame]]:
        pcs = {pc for stack in stacks.values() for pc in stack}
        with objects._lock:
            frames = self._resolve(pcs)
        return {sid: [frames[pc] for pc in stack] for sid, stack in stacks.items()}

    def symbolize_pcs(self, pcs: Sequence[int]) -> list[Frame]:
        with objects._lock:
            frames = self._resolve(set(pcs))
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
            obj = self._object(m)
            if obj is None:
                out[pc] = Frame(pc, m.path, pc - m.start + m.offset, "", 0)
                continue
            touched.add(id(obj))
            vaddr = obj.image.file_offset_to_vaddr(pc - m.start + m.offset)
            hit = obj.resolved.get(vaddr)
            if hit is not None:
                out[pc] = Frame(pc, m.path, vaddr, *hit)
                continue
            try:
                raw = obj.lookup_raw(vaddr)
            except Exception:  # noqa: BLE001 - a bad ELF must not fail a report
                raw = ("", 0, "", 0)
            fresh.append((pc, m, obj, vaddr, raw))
        if fresh:
            names = demangle_all({raw[0] for *_, raw in fresh if raw[0]})
            for pc, m, obj, vaddr, (fn, off, file, line) in fresh:
                value = (names.get(fn, fn), off, file, line)
                obj.remember(vaddr, value)
                out[pc] = Frame(pc, m.path, vaddr, *value)
        for obj in {id(o): o for o in self._objects.values() if o is not None}.values():
            if id(obj) in touched:
                obj.flush()
        return out
