"""The little of an ELF file that symbolization needs, parsed with struct.

Headers, PT_LOAD segments, the build-id note, .gnu_debuglink and the raw
symbol tables. pyelftools goes through `construct` and is 10-30x slower on
symbol tables; it is used only for
DWARF (unreachable.symbolize.dwarf_lines). 64-bit little-endian only.
"""

from __future__ import annotations

import os
import struct
import zlib
from dataclasses import dataclass, field
from typing import BinaryIO

from unreachable.symbolize.files import (
    ANY_OWNER,
    MAX_SECTION_BYTES,
    FilePolicy,
    Mapped,
    file_identity,
    open_checked,
)

_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
_PHDR = struct.Struct("<IIQQQQQQ")
_SHDR = struct.Struct("<IIQQQQIIQQ")
_CHDR = struct.Struct("<IIQQ")
_SYM = "<IBBHQQ"

PT_LOAD = 1
PT_NOTE = 4
SHT_SYMTAB = 2
SHT_NOTE = 7
SHT_NOBITS = 8
SHT_DYNSYM = 11
SHF_COMPRESSED = 0x800
ELFCOMPRESS_ZLIB = 1
NT_GNU_BUILD_ID = 3
STT_FUNC = 2
STT_GNU_IFUNC = 10
STB_LOCAL, STB_GLOBAL, STB_WEAK = 0, 1, 2
SHN_UNDEF = 0
SHN_XINDEX = 0xFFFF
_MAX_TABLE = 64 << 20  # program or section header table: real ones are a few KiB


class NotElf(ValueError):
    pass


@dataclass(slots=True, eq=False, repr=False)
class Section:
    """One ELF section header."""

    name: str
    type: int
    flags: int
    offset: int
    size: int
    link: int


@dataclass(slots=True, eq=False, repr=False)
class Load:
    """One PT_LOAD program header."""

    offset: int
    vaddr: int
    filesz: int
    memsz: int


@dataclass(slots=True)
class ElfImage:
    """An ELF file's headers; section contents are read on demand."""

    path: str
    elf_type: int
    loads: list[Load]
    sections: list[Section]
    build_id: str = ""
    debuglink: tuple[str, int] | None = None  # (file name, CRC32)
    policy: FilePolicy = ANY_OWNER  # what every reopening of `path` must pass
    # The file read, as fstat saw it then: (dev, ino, size, mtime_ns, ctime_ns).
    identity: tuple[int, ...] = ()
    _by_name: dict[str, Section] = field(default_factory=dict)

    def section(self, name: str) -> Section | None:
        return self._by_name.get(name)

    def has_section_data(self, name: str) -> bool:
        s = self._by_name.get(name)
        return s is not None and s.type != SHT_NOBITS and s.size > 0

    @property
    def has_dwarf_lines(self) -> bool:
        return self.has_section_data(".debug_info") and self.has_section_data(".debug_line")

    @property
    def has_symtab(self) -> bool:
        return self.has_section_data(".symtab")

    def file_offset_to_vaddr(self, offset: int) -> int:
        """The link-time address of the byte at `offset` in the file."""
        for seg in self.loads:
            if seg.offset <= offset < seg.offset + max(seg.filesz, 1):
                return offset - seg.offset + seg.vaddr
        if self.loads:  # past every segment's file data: use the first one's bias
            return offset - self.loads[0].offset + self.loads[0].vaddr
        return offset

    def read_section(self, sec: Section) -> bytes:
        if sec.type == SHT_NOBITS or not sec.size or sec.size > MAX_SECTION_BYTES:
            return b""
        with open_checked(self.path, self.policy, self.identity) as f:
            f.seek(sec.offset)
            data = f.read(sec.size)
        if sec.flags & SHF_COMPRESSED:
            if len(data) < _CHDR.size:
                return b""
            ch_type, _res, ch_size, _align = _CHDR.unpack_from(data)
            if ch_type != ELFCOMPRESS_ZLIB:
                return b""
            # Bounded: a crafted header may promise little and inflate to a lot.
            inflate = zlib.decompressobj()
            data = inflate.decompress(data[_CHDR.size :], min(ch_size, MAX_SECTION_BYTES))
        return data

    def function_symbols(self, table: str) -> list[tuple[int, int, int, str]]:
        """(value, size, binding, name) of the defined functions in .symtab or .dynsym."""
        sec = self._by_name.get(table)
        if sec is None or sec.type == SHT_NOBITS or sec.link >= len(self.sections):
            return []
        data = self.read_section(sec)
        strtab = self.read_section(self.sections[sec.link])
        data = data[: len(data) - len(data) % 24]
        out = []
        for name_off, info, _other, shndx, value, size in struct.iter_unpack(_SYM, data):
            if (info & 0xF) not in (STT_FUNC, STT_GNU_IFUNC) or shndx == SHN_UNDEF or not value:
                continue
            end = strtab.find(b"\0", name_off)
            name = strtab[name_off : end if end >= 0 else len(strtab)]
            out.append((value, size, info >> 4, name.decode(errors="replace")))
        return out


def _notes(data: bytes) -> list[tuple[int, bytes, bytes]]:
    out = []
    pos = 0
    while pos + 12 <= len(data):
        namesz, descsz, ntype = struct.unpack_from("<III", data, pos)
        pos += 12
        name = data[pos : pos + namesz]
        pos += (namesz + 3) & ~3
        desc = data[pos : pos + descsz]
        pos += (descsz + 3) & ~3
        out.append((ntype, name, desc))
    return out


def _identity(f: BinaryIO) -> tuple[int, ...]:
    """The open file's identity (files.file_identity): ElfImage.identity."""
    return file_identity(os.fstat(f.fileno()))


def read_elf(path: str, policy: FilePolicy = ANY_OWNER, mapped: Mapped = None) -> ElfImage:
    """Parse the headers of the ELF file at `path`, which must pass `policy`
    and be the file `mapped`, if given (files.check_mapped; NotElf, OSError)."""
    with open_checked(path, policy, mapped=mapped) as f:
        head = f.read(_EHDR.size)
        if len(head) < _EHDR.size or head[:4] != b"\x7fELF":
            raise NotElf(f"{path}: not an ELF file")
        if head[4] != 2 or head[5] != 1:
            raise NotElf(f"{path}: not a 64-bit little-endian ELF file")
        (_ident, e_type, _mach, _ver, _entry, phoff, shoff, _flags, _ehsize, phentsize, phnum,
         shentsize, shnum, shstrndx) = _EHDR.unpack(head)  # fmt: skip
        loads: list[Load] = []
        note_segments: list[tuple[int, int]] = []
        if phoff and phnum and phentsize >= _PHDR.size:
            f.seek(phoff)
            table = f.read(min(phentsize * phnum, _MAX_TABLE))
            for i in range(len(table) // phentsize):
                p_type, _pf, p_off, p_vaddr, _pa, p_filesz, p_memsz, _al = _PHDR.unpack_from(
                    table, i * phentsize
                )
                if p_type == PT_LOAD:
                    loads.append(Load(p_off, p_vaddr, p_filesz, p_memsz))
                elif p_type == PT_NOTE:
                    note_segments.append((p_off, p_filesz))
        raw_sections: list[tuple[int, ...]] = []
        if shoff and shentsize >= _SHDR.size:
            f.seek(shoff)
            first = f.read(shentsize)
            if len(first) >= _SHDR.size:
                s0 = _SHDR.unpack_from(first)
                if shnum == 0:
                    shnum = s0[5]
                if shstrndx == SHN_XINDEX:
                    shstrndx = s0[6]
                f.seek(shoff)
                table = f.read(min(shentsize * shnum, _MAX_TABLE))
                raw_sections = [
                    _SHDR.unpack_from(table, i * shentsize) for i in range(len(table) // shentsize)
                ]
        names = b""
        if 0 < shstrndx < len(raw_sections):
            s = raw_sections[shstrndx]
            f.seek(s[4])
            names = f.read(min(s[5], 1 << 24))
        sections = []
        for sh_name, sh_type, sh_flags, _addr, sh_offset, sh_size, sh_link, *_rest in raw_sections:
            end = names.find(b"\0", sh_name)
            name = names[sh_name : end if end >= 0 else len(names)].decode(errors="replace")
            sections.append(Section(name, sh_type, sh_flags, sh_offset, sh_size, sh_link))
        image = ElfImage(path, e_type, loads, sections, policy=policy, identity=_identity(f))
        image._by_name = {s.name: s for s in reversed(sections) if s.name}

        note_blobs: list[bytes] = []
        bid_sec = image._by_name.get(".note.gnu.build-id")
        if bid_sec is not None and bid_sec.type == SHT_NOTE:
            f.seek(bid_sec.offset)
            note_blobs.append(f.read(min(bid_sec.size, 4096)))
        else:
            for off, size in note_segments:
                f.seek(off)
                note_blobs.append(f.read(min(size, 1 << 16)))
        for blob in note_blobs:
            for ntype, owner, desc in _notes(blob):
                if ntype == NT_GNU_BUILD_ID and owner.rstrip(b"\0") == b"GNU" and desc:
                    image.build_id = desc.hex()
                    break
            if image.build_id:
                break

        link = image._by_name.get(".gnu_debuglink")
        if link is not None and link.type != SHT_NOBITS and 8 <= link.size <= 4096:
            f.seek(link.offset)
            data = f.read(link.size)
            nul = data.find(b"\0")
            if nul > 0:
                crc_at = (nul + 4) & ~3
                if crc_at + 4 <= len(data):
                    (crc,) = struct.unpack_from("<I", data, crc_at)
                    image.debuglink = (data[:nul].decode(errors="replace"), crc)
    return image
