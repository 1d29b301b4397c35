"""Data symbols of an ELF file (variables, for naming a root word), and its
thread-local segment (for naming a word of a thread's TLS).

The symbolizer (elf_symbols.py) keeps function symbols only; a root
word in .data or .bss is named by the object symbol that covers it:
.symtab when the file has one, else .dynsym (exported variables only).
"""

from __future__ import annotations

import bisect
import struct
from dataclasses import dataclass
from functools import lru_cache

from unreachable.symbolize.elf_file import SHN_UNDEF, SHT_NOBITS, ElfImage, NotElf, read_elf
from unreachable.symbolize.files import Mapped, open_checked, stat_checked

STT_OBJECT = 1
STT_TLS = 6
PT_TLS = 7
_SYM = "<IBBHQQ"
_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
_PHDR = struct.Struct("<IIQQQQQQ")
MAX_TABLE = 64 << 20  # as read_elf's: real program header tables are a few KiB


@dataclass(frozen=True, slots=True)
class DataSymbols:
    """Sized variables, sorted by link-time address; TLS ones apart (their
    value is an offset into the TLS segment)."""

    starts: list[int]
    ends: list[int]
    names: list[str]
    tls: list[tuple[int, int, str]]  # (offset, size, name)
    tls_memsz: int  # PT_TLS: the segment's size and alignment (0: none)
    tls_align: int

    def lookup(self, vaddr: int) -> tuple[str, int] | None:
        i = bisect.bisect_right(self.starts, vaddr) - 1
        if i >= 0 and vaddr < self.ends[i]:
            return self.names[i], vaddr - self.starts[i]
        return None

    def lookup_tls(self, offset: int) -> tuple[str, int] | None:
        for start, size, name in self.tls:
            if start <= offset < start + max(size, 1):
                return name, offset - start
        return None


def _symbols(
    image: ElfImage, table: str
) -> tuple[list[tuple[int, int, str]], list[tuple[int, int, str]]]:
    sec = image.section(table)
    if sec is None or sec.type == SHT_NOBITS or sec.link >= len(image.sections):
        return [], []
    data = image.read_section(sec)
    strtab = image.read_section(image.sections[sec.link])
    data = data[: len(data) - len(data) % 24]
    objects: list[tuple[int, int, str]] = []
    tls: list[tuple[int, int, str]] = []
    for name_off, info, _other, shndx, value, size in struct.iter_unpack(_SYM, data):
        kind = info & 0xF
        if kind not in (STT_OBJECT, STT_TLS) or shndx == SHN_UNDEF or not size:
            continue
        end = strtab.find(b"\0", name_off)
        name = strtab[name_off : end if end >= 0 else len(strtab)].decode(errors="replace")
        if not name:
            continue
        (tls if kind == STT_TLS else objects).append((value, size, name))
    return objects, tls


def _tls_segment(path: str, mapped: Mapped = None) -> tuple[int, int]:
    # Opened again by path, which the target's user may have swapped for a
    # FIFO or a huge file since read_elf: the inode is checked again, and the
    # table read no longer than read_elf reads one.
    with open_checked(path, mapped=mapped) as f:
        head = f.read(_EHDR.size)
        if len(head) < _EHDR.size:
            return 0, 0
        fields = _EHDR.unpack(head)
        phoff, phentsize, phnum = fields[5], fields[9], fields[10]
        if not phoff or phentsize < _PHDR.size:
            return 0, 0
        f.seek(phoff)
        table = f.read(min(phentsize * phnum, MAX_TABLE))
    for i in range(len(table) // phentsize):
        p_type, _flags, _off, _vaddr, _pa, _filesz, memsz, align = _PHDR.unpack_from(
            table, i * phentsize
        )
        if p_type == PT_TLS:
            return memsz, max(align, 1)
    return 0, 0


@lru_cache(maxsize=128)
def _load(path: str, dev: int, ino: int, mtime: int) -> DataSymbols | None:
    del mtime  # cache key only
    try:
        # The inode stat'ed (and checked) for the key is the one read.
        image = read_elf(path, mapped=(dev, ino))
        objects, tls = _symbols(image, ".symtab")
        if not objects and not tls:
            objects, tls = _symbols(image, ".dynsym")
        memsz, align = _tls_segment(path, (dev, ino))
    except (OSError, NotElf, ValueError, struct.error):
        return None
    best: dict[int, tuple[int, str]] = {}
    for value, size, name in objects:
        if value not in best or size > best[value][0]:
            best[value] = (size, name)
    starts = sorted(best)
    return DataSymbols(
        starts,
        [s + best[s][0] for s in starts],
        [best[s][1] for s in starts],
        sorted(tls),
        memsz,
        align,
    )


def load_data_symbols(path: str, mapped: Mapped = None) -> DataSymbols | None:
    """The data symbols of the file at `path`, which must be the file mapped,
    if given (files.check_mapped); None if it cannot be read."""
    try:
        st = stat_checked(path, mapped=mapped)
    except OSError:
        return None
    return _load(path, st.st_dev, st.st_ino, st.st_mtime_ns)
