"""Unwind a captured thread's stack with the call frame information of its
objects (.eh_frame, read with pyelftools), to say which frame a stack root
word lies in.

The thread's registers come from the capture, its stack words from a copy
read while it was stopped (or from the frozen snapshot child). Each frame's
canonical frame address (CFA) follows from its FDE's row for the pc; the
return address and the callee-saved registers (rbx, rbp, r12-r15) saved in
the frame are read at their offsets from it. The frame of function F spans
[its SP, its CFA): a word there belongs to F, whose pc is the instruction
after its current call (the thread's own pc in the innermost frame). An
FDE that computes the CFA with a DWARF expression (PLT entries, signal
trampolines), a pc outside any object, or a frame that does not move up
the stack ends the walk; the words above it stay unattributed.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from unreachable.process.mapped_file import file_for
from unreachable.process.maps import Mapping, find_mapping
from unreachable.symbolize.elf_file import NotElf, read_elf
from unreachable.symbolize.files import open_checked, stat_checked

# DWARF register numbers (x86-64 psABI) of the user_regs_struct fields.
_DWARF = {"rax": 0, "rdx": 1, "rcx": 2, "rbx": 3, "rsi": 4, "rdi": 5, "rbp": 6, "rsp": 7}
_DWARF |= {f"r{n}": n for n in range(8, 16)}
RA = 16
CALLEE_SAVED = (3, 6, 12, 13, 14, 15)
MAX_FRAMES = 512

ReadWord = Callable[[int], int | None]


@dataclass(frozen=True, slots=True)
class StackFrame:
    index: int
    pc: int  # the thread's pc (frame 0) or the return address into this frame
    sp: int  # lowest address of the frame
    cfa: int  # one past its highest (the caller's SP)


@dataclass(frozen=True, slots=True)
class _Cfi:
    starts: list[int]
    ends: list[int]
    fdes: list[Any]
    bias_vaddr: int  # link-time address of file offset 0 of the first PT_LOAD


@lru_cache(maxsize=64)
def _load_cfi(path: str, dev: int, ino: int, mtime: int) -> _Cfi | None:
    del mtime  # cache key only
    from elftools.common.exceptions import ELFError
    from elftools.dwarf.callframe import FDE
    from elftools.elf.elffile import ELFFile

    try:
        # open_checked: the path may have become a FIFO, a device or another
        # file since the stat that keyed this cache; the inode stat'ed is read.
        with open_checked(path, mapped=(dev, ino)) as f:
            elf = ELFFile(f)
            dwarf = elf.get_dwarf_info(follow_links=False)
            entries = dwarf.EH_CFI_entries() if dwarf.has_EH_CFI() else []
            rows = []
            for e in entries:
                if isinstance(e, FDE):
                    start = e.header["initial_location"]
                    rows.append((start, start + e.header["address_range"], e))
    except (OSError, ELFError, ValueError, KeyError, AssertionError, struct.error):
        return None
    rows.sort(key=lambda r: r[0])
    return _Cfi([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], 0)


@lru_cache(maxsize=256)
def _file_to_vaddr(path: str, dev: int, ino: int, mtime: int) -> Callable[[int], int] | None:
    del mtime
    try:
        return read_elf(path, mapped=(dev, ino)).file_offset_to_vaddr
    except (OSError, NotElf, ValueError):
        return None


def _row(fde: Any, vaddr: int) -> dict[str | int, Any] | None:
    try:
        table = fde.get_decoded().table
    except Exception:  # noqa: BLE001 - an opcode pyelftools cannot decode ends the walk
        return None
    best = None
    for row in table:
        if row["pc"] > vaddr:
            break
        best = row
    return best


def unwind(
    regs: dict[str, int], read: ReadWord, mappings: list[Mapping], pid: int, root: str
) -> list[StackFrame]:
    """The thread's frames, innermost first, as far as its CFI goes."""
    values = {num: regs.get(name, 0) for name, num in _DWARF.items()}
    pc = regs.get("rip", 0)
    frames: list[StackFrame] = []
    for index in range(MAX_FRAMES):
        sp = values[7]
        m = find_mapping(mappings, pc)
        if m is None or not m.path.startswith("/"):
            break
        path, _, mapped = file_for(pid, m, root)
        try:
            st = stat_checked(path, mapped=mapped)
        except OSError:
            break
        to_vaddr = _file_to_vaddr(path, st.st_dev, st.st_ino, st.st_mtime_ns)
        cfi = _load_cfi(path, st.st_dev, st.st_ino, st.st_mtime_ns)
        if to_vaddr is None or cfi is None:
            break
        # A return address points after the call: look the call up.
        vaddr = to_vaddr(pc - m.start + m.offset) - (1 if index else 0)
        i = bisect.bisect_right(cfi.starts, vaddr) - 1
        if i < 0 or vaddr >= cfi.ends[i]:
            break
        row = _row(cfi.fdes[i], vaddr)
        if row is None:
            break
        rule = row["cfa"]
        if rule.expr is not None or rule.reg not in values:
            break
        cfa = values[rule.reg] + rule.offset
        frames.append(StackFrame(index, pc, sp, cfa))
        saved: dict[int, int] = {}
        for reg in (RA, *CALLEE_SAVED):
            r = row.get(reg)
            if r is not None and r.type == "OFFSET":
                word = read(cfa + r.arg)
                if word is None:
                    return frames
                saved[reg] = word
        if RA not in saved or cfa <= sp:
            break
        values.update({k: v for k, v in saved.items() if k != RA})
        values[7] = cfa
        pc = saved[RA]
        if not pc:
            break
    return frames


def frame_of(frames: list[StackFrame], address: int) -> StackFrame | None:
    """The frame whose span holds address (below the innermost SP: the
    innermost frame's red zone)."""
    if frames and address < frames[0].sp:
        return frames[0]
    for f in frames:
        if f.sp <= address < f.cfa:
            return f
    return None


def stack_reader(lo: int, data: bytes) -> ReadWord:
    def read(addr: int) -> int | None:
        off = addr - lo
        if 0 <= off <= len(data) - 8:
            return int.from_bytes(data[off : off + 8], "little")
        return None

    return read
