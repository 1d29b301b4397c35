"""Each load of an ELF object in a process, told apart by its load bias.

An object's globals lie in several mappings: .data and the rest of its
writable segment in the file's pages, .bss past them anonymous, the
segment cut where RELRO was made read-only. Root regions name an object's
globals once per load, so they are keyed by the object and its load bias,
not by a mapping's start; two loads of one file (dlmopen into a namespace
of its own) have two biases and stay two.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from unreachable.process.mapped_file import file_for
from unreachable.process.maps import Mapping
from unreachable.symbolize.elf_file import ElfImage, NotElf, read_elf

PAGE = os.sysconf("SC_PAGE_SIZE")
Loads = dict[str, list["ObjectLoad"]]  # object path -> its loads, lowest first


@dataclass(slots=True)
class ObjectLoad:
    """One load of one object: where its segments lie."""

    object: str  # the path /proc/PID/maps names
    file: str  # the file to read it from (through the target's root)
    bias: int  # load address minus link-time address
    end: int  # end of its last segment's memory, .bss included
    data_start: int = 0  # its lowest writable address (0: none seen)
    copies: int = 1  # loads of this object in the process
    # (device, inode) of the file read for its headers: later reads of
    # `file` must find it (files.check_mapped).
    mapped: tuple[int, int] | None = None

    @property
    def name(self) -> str:
        """How reports name it: its path, and its place when it is loaded twice."""
        if self.copies == 1:
            return self.object
        return f"{self.object} (loaded at {self.bias:#x})"


def object_loads(mappings: Sequence[Mapping], pid: int, root: str) -> Loads:
    """Each load of every mapped ELF object with a writable mapping.

    A load starts with its first segment's mapping (the kernel and ld.so map
    that one first and lowest); a mapping of the first segment's file page
    that no load found so far covers starts another (a segment sharing that
    file page lies inside the load before it)."""
    writable = {m.path for m in mappings if m.writable and m.path.startswith("/")}
    images: dict[str, tuple[ElfImage, str] | None] = {}
    loads: Loads = {}
    for m in sorted((m for m in mappings if m.path in writable), key=lambda m: m.start):
        if m.path not in images:
            images[m.path] = _image(m, pid, root)
        got = images[m.path]
        if got is None or load_of(loads, m) is not None:
            continue
        image, file = got
        first = image.loads[0]
        if m.offset != _page_down(first.offset):
            continue
        bias = m.start - _page_down(first.vaddr)
        end = bias + max(seg.vaddr + seg.memsz for seg in image.loads)
        read = (image.identity[0], image.identity[1])
        loads.setdefault(m.path, []).append(ObjectLoad(m.path, file, bias, end, mapped=read))
    for m in mappings:
        load = load_of(loads, m) if m.writable else None
        if load is not None and (not load.data_start or m.start < load.data_start):
            load.data_start = m.start
    for same in loads.values():
        for load in same:
            load.copies = len(same)
    return loads


def every_load(loads: Loads) -> Iterator[ObjectLoad]:
    for same in loads.values():
        yield from same


def load_of(loads: Loads, m: Mapping) -> ObjectLoad | None:
    """The load of m's file whose memory holds m's start."""
    for load in loads.get(m.path, ()):
        if load.bias <= m.start < load.end:
            return load
    return None


def _image(m: Mapping, pid: int, root: str) -> tuple[ElfImage, str] | None:
    file = file_for(pid, m, root)
    try:
        image = read_elf(file.path, mapped=file.mapped)
    except (OSError, NotElf, ValueError):
        return None
    return (image, file.path) if image.loads else None


def _page_down(n: int) -> int:
    return n & ~(PAGE - 1)
