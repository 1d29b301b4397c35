"""file:line lookups in DWARF line tables, decoded one compilation unit at a time.

Decoding every line program of a big library takes seconds in pyelftools
(14.6 s for libpython), decoding the few units a backtrace touches takes tens
of milliseconds. So: an address ->
unit index from .debug_aranges (or the units' DW_AT_low_pc/high_pc/ranges
when a compiler omits aranges), then only that unit's line program. Both the
index and each decoded unit go to the on-disk cache.
"""

from __future__ import annotations

import bisect
import os
import struct
from typing import Any

from unreachable.symbolize.cache import ObjectCache
from unreachable.symbolize.files import ANY_OWNER, FilePolicy, open_checked


class LineTable:
    def __init__(
        self,
        path: str,
        cache: ObjectCache,
        policy: FilePolicy = ANY_OWNER,
        identity: tuple[int, ...] = (),
    ) -> None:
        self._path = path
        self._policy = policy
        self._identity = identity  # the file's when its headers were read (open_checked)
        self._cache = cache
        self._file: Any = None
        self._dwarf: Any = None
        self._index: tuple[list[int], list[int], list[int]] | None = None
        self._complete = False
        self._units: dict[int, tuple[list[int], list[int], list[int], list[str]] | None] = {}
        self.broken = False

    # -- pyelftools, opened only on a cache miss ---------------------------------------
    def _dwarfinfo(self) -> Any:
        if self._dwarf is None:
            from elftools.elf.elffile import ELFFile

            # kept open while in use
            self._file = open_checked(self._path, self._policy, self._identity)
            self._dwarf = ELFFile(self._file).get_dwarf_info()
        return self._dwarf

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
        self._file = self._dwarf = None

    # -- address -> unit ----------------------------------------------------------------
    def _build_index(self, complete: bool) -> tuple[list[tuple[int, int, int]], bool]:
        """(lo, hi, cu offset) ranges: from .debug_aranges; from the units' DIEs when
        `complete` or when there are no aranges (parsing every unit's first DIE is
        slow, and the units aranges leave out usually have no code)."""
        dwarf = self._dwarfinfo()
        ranges: list[tuple[int, int, int]] = []
        covered: set[int] = set()
        if dwarf.debug_aranges_sec is not None:
            for lo, length, cu_offset in parse_aranges(dwarf.debug_aranges_sec.stream.getvalue()):
                if length:
                    ranges.append((lo, lo + length, cu_offset))
                covered.add(cu_offset)
        if complete or not ranges:
            for cu in dwarf.iter_CUs():
                if cu.cu_offset in covered:
                    continue
                try:
                    ranges += [(lo, hi, cu.cu_offset) for lo, hi in _die_ranges(dwarf, cu)]
                except Exception:  # noqa: BLE001 - odd DWARF: skip this unit's index
                    continue
            complete = True
        ranges.sort()
        return ranges, complete

    def _load_index(self, complete: bool = False) -> None:
        if not complete:
            cached = self._cache.load("cu_index")
            if _valid_index(cached):
                self._index = (cached["lo"], cached["hi"], cached["cu"])
                self._complete = bool(cached.get("complete"))
                return
        ranges, self._complete = self._build_index(complete)
        self._index = ([r[0] for r in ranges], [r[1] for r in ranges], [r[2] for r in ranges])
        lo, hi, cu = self._index
        self._cache.save("cu_index", {"lo": lo, "hi": hi, "cu": cu, "complete": self._complete})

    def _search(self, addr: int) -> int | None:
        assert self._index is not None
        lo, hi, cu = self._index
        i = bisect.bisect_right(lo, addr) - 1
        # Ranges of different units may nest (rare); look back a little.
        for j in range(i, max(i - 8, -1), -1):
            if lo[j] <= addr < hi[j]:
                return cu[j]
        return None

    def _unit_at(self, addr: int) -> int | None:
        if self._index is None:
            self._load_index()
        found = self._search(addr)
        if found is None and not self._complete:
            self._load_index(complete=True)  # once per object; cached on disk
            found = self._search(addr)
        return found

    # -- one unit's rows ----------------------------------------------------------------
    def _decode_unit(self, cu_offset: int) -> tuple[list[int], list[int], list[int], list[str]]:
        dwarf = self._dwarfinfo()
        cu = dwarf.get_CU_at(cu_offset)
        prog = dwarf.line_program_for_CU(cu)
        if prog is None:
            return [], [], [], []
        version = prog.header.version
        comp_dir = ""
        top = cu.get_top_DIE()
        if "DW_AT_comp_dir" in top.attributes:
            comp_dir = _text(top.attributes["DW_AT_comp_dir"].value)
        dirs = [_text(d) for d in prog.header.get("include_directory", [])]
        entries = prog.header.get("file_entry", [])
        files: list[str] = []
        for fe in entries:
            name = _text(fe.name)
            di = fe.dir_index
            if version >= 5:
                d = dirs[di] if di < len(dirs) else ""
            else:
                d = comp_dir if di == 0 else (dirs[di - 1] if di - 1 < len(dirs) else "")
            if d and not os.path.isabs(d) and comp_dir and d != comp_dir:
                d = os.path.join(comp_dir, d)
            files.append(os.path.normpath(os.path.join(d, name)) if d else name)
        base = 0 if version >= 5 else 1
        rows: list[tuple[int, int, int, int]] = []  # (addr, order, file index or -1, line)
        for entry in prog.get_entries():
            st = entry.state
            if st is None:
                continue
            if st.end_sequence:
                rows.append((st.address, 0, -1, 0))
            else:
                rows.append((st.address, 1, st.file - base, st.line))
        rows.sort(key=lambda r: (r[0], r[1]))
        addrs = [r[0] for r in rows]
        fidx = [r[2] if 0 <= r[2] < len(files) else -2 for r in rows]
        lines = [r[3] for r in rows]
        return addrs, fidx, lines, files

    def _unit(self, cu_offset: int) -> tuple[list[int], list[int], list[int], list[str]] | None:
        if cu_offset not in self._units:
            name = f"cu-{cu_offset:x}"
            cached = self._cache.load(name)
            if isinstance(cached, list) and len(cached) == 4:
                self._units[cu_offset] = tuple(cached)
            else:
                try:
                    unit = self._decode_unit(cu_offset)
                except Exception:  # noqa: BLE001 - a bad line program costs its lines only
                    unit = None
                self._units[cu_offset] = unit
                if unit is not None:
                    self._cache.save(name, list(unit))
        return self._units[cu_offset]

    def lookup(self, addr: int) -> tuple[str, int] | None:
        """(file, line) of the instruction at link-time address `addr`."""
        if self.broken:
            return None
        try:
            cu = self._unit_at(addr)
        except Exception:  # noqa: BLE001 - unreadable DWARF: no lines for this object
            self.broken = True
            return None
        if cu is None:
            return None
        unit = self._unit(cu)
        if unit is None:
            return None
        addrs, fidx, lines, files = unit
        i = bisect.bisect_right(addrs, addr) - 1
        if i < 0 or fidx[i] < 0 or not lines[i]:
            return None
        return files[fidx[i]], lines[i]


def parse_aranges(data: bytes) -> list[tuple[int, int, int]]:
    """(address, length, CU offset) of every .debug_aranges tuple, parsed with struct
    (pyelftools' construct-based parser takes ~150 ms on libc's)."""
    out: list[tuple[int, int, int]] = []
    pos = 0
    while pos + 4 <= len(data):
        (length,) = struct.unpack_from("<I", data, pos)
        if length == 0xFFFFFFFF:
            (length,) = struct.unpack_from("<Q", data, pos + 4)
            hdr, off_fmt = pos + 12, "<Q"
        else:
            hdr, off_fmt = pos + 4, "<I"
        end = hdr + length
        if length == 0 or end > len(data):
            break
        cu_offset = struct.unpack_from(off_fmt, data, hdr + 2)[0]
        at = hdr + 2 + struct.calcsize(off_fmt)
        addr_size, seg_size = data[at], data[at + 1]
        if addr_size not in (4, 8) or seg_size:
            pos = end
            continue
        tuple_size = 2 * addr_size
        at += 2
        at += (-(at - pos)) % tuple_size  # tuples are aligned to their size from the unit start
        fmt = "<II" if addr_size == 4 else "<QQ"
        usable = (end - at) - (end - at) % tuple_size
        for lo, n in struct.iter_unpack(fmt, data[at : at + usable]):
            if lo == 0 and n == 0:
                break
            out.append((lo, n, cu_offset))
        pos = end
    return out


def _valid_index(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and all(isinstance(value.get(k), list) for k in ("lo", "hi", "cu"))
        and len(value["lo"]) == len(value["hi"]) == len(value["cu"])
    )


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _die_ranges(dwarf: Any, cu: Any) -> list[tuple[int, int]]:
    top = cu.get_top_DIE()
    attrs = top.attributes
    if "DW_AT_ranges" in attrs:
        attr = attrs["DW_AT_ranges"]
        if attr.form == "DW_FORM_rnglistx":
            return []  # rare (split DWARF); the unit is simply not indexed
        rl = dwarf.range_lists()
        if rl is None:
            return []
        base = attrs["DW_AT_low_pc"].value if "DW_AT_low_pc" in attrs else 0
        out = []
        for e in rl.get_range_list_at_offset(attr.value, cu=cu):
            if hasattr(e, "base_address"):
                base = e.base_address
            elif e.is_absolute:
                out.append((e.begin_offset, e.end_offset))
            else:
                out.append((base + e.begin_offset, base + e.end_offset))
        return [(lo, hi) for lo, hi in out if hi > lo]
    if "DW_AT_low_pc" in attrs and "DW_AT_high_pc" in attrs:
        lo = attrs["DW_AT_low_pc"].value
        hi_attr = attrs["DW_AT_high_pc"]
        hi = hi_attr.value if hi_attr.form == "DW_FORM_addr" else lo + hi_attr.value
        return [(lo, hi)] if hi > lo else []
    return []
