"""Where glibc keeps its heap's roots, found in the target's libc.so.6 file.

glibc names none of main_arena, mp_ or the per-thread `tcache` in its dynamic
symbols. The separate debug file (Debian's libc6-dbg, found by build-id or
.gnu_debuglink) has them in .symtab and is used when present; otherwise they
are recognised in the file itself (docs/glibc-heap.md):

- main_arena: the one RELATIVE relocation (.relr.dyn or .rela.dyn) that sets
  a word to the address 0x870 bytes below itself, where the file's bytes are
  main_arena's static initialiser (all zero but `next` and
  attached_threads = 1).
- mp_: its static initialiser's bytes (tcache_max_bytes any), found once
  in .data.
- tcache: one of libc's R_X86_64_TPOFF64 GOT slots; which one is decided in
  the target (glibc_heap.py: the slot whose value, added to each thread's
  thread pointer, names a tcache chunk or nothing in every thread).
- the code of malloc.c, to tell a thread stopped inside malloc: its
  functions' span (.symtab), or the span of the malloc family's exported
  entry points (.dynsym), which the static helpers compiled between them
  share.
"""

from __future__ import annotations

import io
import re
import struct
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from unreachable.symbolize.config import default_debug_dirs
from unreachable.symbolize.elf_file import NotElf, read_elf
from unreachable.symbolize.files import FilePolicy, Mapped, open_checked, stat_checked

if TYPE_CHECKING:
    from collections.abc import Iterator

    from elftools.elf.elffile import ELFFile

# A libc of a few MiB, or tens with its DWARF left in; _facts reads it whole.
LIBC_FILE = FilePolicy(max_bytes=256 << 20)

# pyelftools is imported where it is used: a scan of a process under the shim
# never reads libc, and the leak check at exit runs a scan in every process
# that exits, where that import is start-up time spent for nothing.

R_X86_64_RELATIVE = 8
R_X86_64_TPOFF64 = 18
# The malloc family's exported entry points, all defined in malloc/malloc.c.
MALLOC_ENTRIES = (
    "malloc",
    "free",
    "calloc",
    "realloc",
    "memalign",
    "aligned_alloc",
    "posix_memalign",
    "valloc",
    "pvalloc",
    "malloc_usable_size",
    "malloc_trim",
    "mallinfo",
    "mallinfo2",
    "malloc_stats",
    "malloc_info",
    "mallopt",
)


def arena_layout(minor: int) -> tuple[int, int, int]:
    """(sizeof, offset of next, offset of attached_threads) of struct
    malloc_state: 2.43 took have_fastchunks and fastbinsY[10] out."""
    return (0x840, 0x818, 0x828) if minor >= 43 else (0x898, 0x870, 0x880)


class LibcUnsupported(Exception):
    """This libc cannot be walked (the message says why, in one line)."""


@dataclass(slots=True, eq=False, repr=False)
class LibcFacts:
    """Link-time addresses in one libc.so.6 (add the load bias)."""

    path: str
    build_id: str
    version: str  # "2.36"
    minor: int
    main_arena: int
    mp: int
    # (GOT slot, offset in libc's TLS block) of every TPOFF64 relocation;
    # tcache_tls is the `tcache` one when debug symbols name it (else -1).
    tpoff_slots: tuple[tuple[int, int], ...]
    tcache_tls: int
    malloc_code: tuple[int, int]  # [lo, hi): malloc.c's code
    how: str  # "debug symbols" or "heuristics"
    image_end: int = 0  # the end of its highest PT_LOAD: libc spans [0, image_end)


def _version(data: bytes) -> tuple[str, int]:
    m = re.search(rb"GNU C Library [^\n\0]*release version 2\.(\d+)", data)
    if not m:
        raise LibcUnsupported("no glibc version banner in the file")
    minor = int(m.group(1))
    return f"2.{minor}", minor


def _relative_relocs(elf: ELFFile, data: bytes) -> list[tuple[int, int]]:
    """(target, addend) of every RELATIVE relocation; RELR's addends are the
    words in place."""
    out: list[tuple[int, int]] = []
    for sec in elf.iter_sections():
        kind = sec["sh_type"]
        if kind == "SHT_RELA":
            raw = sec.data()
            for off, info, addend in struct.iter_unpack("<QQq", raw[: len(raw) // 24 * 24]):
                if info & 0xFFFFFFFF == R_X86_64_RELATIVE:
                    out.append((off, addend))
        elif kind == "SHT_RELR" or sec.name == ".relr.dyn":
            raw = sec.data()
            where = 0
            for (entry,) in struct.iter_unpack("<Q", raw[: len(raw) // 8 * 8]):
                if not entry & 1:
                    out.append((entry, -1))
                    where = entry + 8
                else:
                    for bit in range(1, 64):
                        if entry >> bit & 1:
                            out.append((where + (bit - 1) * 8, -1))
                    where += 63 * 8
    return out


def _file_offset(elf: ELFFile, vaddr: int, size: int) -> int | None:
    for seg in elf.iter_segments():
        if seg["p_type"] == "PT_LOAD":
            lo, filesz = seg["p_vaddr"], seg["p_filesz"]
            if lo <= vaddr and vaddr + size <= lo + filesz:
                return seg["p_offset"] + vaddr - lo
    return None


def _find_main_arena(elf: ELFFile, data: bytes, minor: int) -> int:
    size, next_at, attached_at = arena_layout(minor)
    found = set()
    for target, addend in _relative_relocs(elf, data):
        off = _file_offset(elf, target, 8)
        if off is None:
            continue
        value = struct.unpack_from("<Q", data, off)[0] if addend < 0 else addend
        base = target - next_at
        if value != base:
            continue
        boff = _file_offset(elf, base, size)
        if boff is None:
            continue
        words = struct.unpack_from(f"<{size // 8}Q", data, boff)
        rest = [w for i, w in enumerate(words) if i * 8 not in (next_at, attached_at)]
        if words[attached_at // 8] == 1 and not any(rest):
            found.add(base)
    if len(found) != 1:
        raise LibcUnsupported(f"main_arena not recognised ({len(found)} candidates)")
    return found.pop()


def _mp_pattern(minor: int) -> bytes:
    """mp_'s static initialiser (malloc.c), as the file holds it, as a
    regular expression: trim, top_pad and mmap thresholds 128 KiB,
    arena_test 8, n_mmaps_max 65536, 64 tcache bins of 7, everything else 0.
    From 2.35 the huge-page fields (two words and an int) come before
    n_mmaps, and the four ints after them end 4 bytes short of the next
    word. tcache_max_bytes is any word: 0x408 upstream up to 2.42, but
    distributions' 2.42 carry the release branch's fixes of that bound
    (Ubuntu's 2.42 holds 0x411)."""
    head = struct.pack("<QQQQQ", 0x20000, 0x20000, 0x20000, 8, 0)
    # 2.43: thp_mode = malloc_thp_mode_not_supported (3) and its padding.
    thp = struct.pack("<ii", 3, 0) if minor >= 43 else b""
    huge = bytes(0x14) if minor >= 35 else b""
    mmaps = struct.pack("<iiii", 0, 0x10000, 0, 0) + (bytes(4) if minor >= 35 else b"")
    rest = struct.pack("<QQQ", 0, 0, 0)  # mmapped_mem, max_mmapped_mem, sbrk_base
    before = re.escape(head + thp + huge + mmaps + rest + struct.pack("<Q", 64))
    fill = 16 if minor >= 43 else 7  # TCACHE_FILL_COUNT
    return before + b"[\\x00-\\xff]{8}" + re.escape(struct.pack("<QQ", fill, 0))


def _find_mp(elf: ELFFile, data: bytes, minor: int) -> int:
    sec = elf.get_section_by_name(".data")
    if sec is None:
        raise LibcUnsupported("libc has no .data")
    body = sec.data()
    pattern = re.compile(_mp_pattern(minor))
    hits = [m.start() for m in pattern.finditer(body) if m.start() % 8 == 0]
    if len(hits) != 1:
        raise LibcUnsupported(f"mp_ not recognised ({len(hits)} candidates)")
    return sec["sh_addr"] + hits[0]


def _tpoff_slots(elf: ELFFile) -> tuple[tuple[int, int], ...]:
    out = []
    for sec in elf.iter_sections():
        if sec["sh_type"] == "SHT_RELA":
            raw = sec.data()
            for off, info, addend in struct.iter_unpack("<QQq", raw[: len(raw) // 24 * 24]):
                if info & 0xFFFFFFFF == R_X86_64_TPOFF64 and info >> 32 == 0:
                    out.append((off, addend))
    return tuple(out)


def _dynsym_span(elf: ELFFile) -> tuple[int, int]:
    """malloc.c's code without its symbols: from the end of the exported
    function before its first entry point to the start of the one after its
    last (its static helpers lie in between; morecore.c is included in it)."""
    from elftools.elf.sections import SymbolTableSection

    dynsym = elf.get_section_by_name(".dynsym")
    if not isinstance(dynsym, SymbolTableSection):
        return (0, 0)
    funcs = []
    for sym in dynsym.iter_symbols():
        if sym["st_info"]["type"] in ("STT_FUNC", "STT_GNU_IFUNC") and sym["st_value"]:
            funcs.append((sym["st_value"], sym["st_size"], sym.name))
    ours = [(v, v + n) for v, n, name in funcs if name in MALLOC_ENTRIES]
    if not ours:
        return (0, 0)
    first, last = min(b for b, _ in ours), max(e for _, e in ours)
    inside = set(MALLOC_ENTRIES)
    lo = max(
        (
            v + n
            for v, n, name in funcs
            if v + n <= first and name not in inside and "morecore" not in name
        ),
        default=first,
    )
    hi = min((v for v, _, name in funcs if v >= last and name not in inside), default=last)
    return (lo, hi)


STT_FUNC, STT_FILE = 2, 4
_SYM = struct.Struct("<IBBHQQ")  # Elf64_Sym: name, info, other, shndx, value, size


def _symtab_rows(elf: ELFFile) -> Iterator[tuple[str, int, int, int]] | None:
    """(name, type, value, size) of each .symtab entry, unpacked from the
    section's bytes in one pass: libc's debug file has some 10,000 symbols,
    and pyelftools' per-symbol parse cost a third of a second on every scan
    without the shim. Only names a caller can want are decoded."""
    from elftools.elf.sections import SymbolTableSection

    symtab = elf.get_section_by_name(".symtab")
    if not isinstance(symtab, SymbolTableSection) or symtab["sh_entsize"] != _SYM.size:
        return None
    raw = symtab.data()
    names = elf.get_section(symtab["sh_link"]).data()
    return (
        (_name(names, st_name), info & 0xF, value, size)
        for st_name, info, _other, _shndx, value, size in _SYM.iter_unpack(
            raw[: len(raw) // _SYM.size * _SYM.size]
        )
    )


def _name(table: bytes, at: int) -> str:
    end = table.find(b"\0", at)
    return table[at : end if end >= 0 else len(table)].decode("utf-8", "replace")


def _debug_symbols(path: str, root: str, mapped: Mapped) -> dict[str, tuple[int, int]] | None:
    """{name: (value, size)} of the few symbols needed, from the debug file."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    from unreachable.symbolize.debuginfo import find_debug_file

    try:
        image = read_elf(path, mapped=mapped)
    except (OSError, NotElf, ValueError):
        return None
    found = find_debug_file(image, path, default_debug_dirs(), root)
    if found is None:
        return None
    wanted = {"main_arena", "mp_", "tcache", *MALLOC_ENTRIES}
    out: dict[str, tuple[int, int]] = {}
    try:
        with open_checked(found.path) as f:
            rows = _symtab_rows(ELFFile(f))
            if rows is None:
                return None
            source = ""
            for name, kind, value, size in rows:
                if kind == STT_FILE:
                    source = name  # the local symbols that follow are its
                elif kind == STT_FUNC and source == "malloc.c" and value:
                    # Its static helpers, whatever suffix the compiler gave
                    # them (unlink_chunk.constprop.0, tcache_init.part.0).
                    out.setdefault(name, (value, size))
                if name in wanted and (value or name == "tcache"):
                    out.setdefault(name, (value, size))
    except (OSError, ELFError):
        return None
    except Exception:  # noqa: BLE001 - a made-up debug file (_facts): the heuristics then
        return None
    return out


@lru_cache(maxsize=16)
def _facts(path: str, root: str, dev: int, ino: int, mtime_ns: int) -> LibcFacts:
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    del mtime_ns  # cache key only
    # The path is the target's: it may be swapped for a FIFO or a huge sparse
    # file after the stat above, so the one inode read is checked and bounded.
    with open_checked(path, LIBC_FILE, mapped=(dev, ino)) as f:
        data = f.read()
    try:
        elf = ELFFile(io.BytesIO(data))
    except ELFError as e:
        raise LibcUnsupported(f"not an ELF file: {e}") from None
    try:
        return _facts_of(elf, data, path, root, (dev, ino))
    except LibcUnsupported:
        raise
    except Exception as e:  # noqa: BLE001 - see below
        # pyelftools reads sections as they are walked: a file whose section
        # headers are made up (the loader reads none of them, so the process
        # runs) raises ELFError, construct's or struct's errors, KeyError...
        # from deep inside, long after the header parsed. The file's fault,
        # not the scanner's: one line naming it, never an internal error.
        raise LibcUnsupported(f"unreadable ELF: {type(e).__name__}: {e}") from None
    finally:
        elf.stream.close()


def _facts_of(elf: ELFFile, data: bytes, path: str, root: str, mapped: Mapped) -> LibcFacts:
    """The facts, by debug symbols, else by heuristics."""
    from elftools.elf.sections import NoteSection

    version, minor = _version(data)
    build_id = ""
    for sec in elf.iter_sections():
        if isinstance(sec, NoteSection):
            for note in sec.iter_notes():
                if note["n_type"] == "NT_GNU_BUILD_ID":
                    build_id = note["n_desc"]
    slots = _tpoff_slots(elf)
    end = max(
        (g["p_vaddr"] + g["p_memsz"] for g in elf.iter_segments() if g["p_type"] == "PT_LOAD"),
        default=0,
    )
    syms = _debug_symbols(path, root, mapped)
    if syms and "main_arena" in syms and "mp_" in syms:
        code = [v for n, v in syms.items() if n not in ("main_arena", "mp_", "tcache")]
        span = (min(v for v, _ in code), max(v + s for v, s in code)) if code else (0, 0)
        return LibcFacts(
            path,
            build_id,
            version,
            minor,
            syms["main_arena"][0],
            syms["mp_"][0],
            slots,
            syms["tcache"][0] if "tcache" in syms else -1,
            span,
            "debug symbols",
            end,
        )
    return LibcFacts(
        path,
        build_id,
        version,
        minor,
        _find_main_arena(elf, data, minor),
        _find_mp(elf, data, minor),
        slots,
        -1,
        _dynsym_span(elf),
        "heuristics",
        end,
    )


def libc_facts(path: str, root: str = "", mapped: Mapped = None) -> LibcFacts:
    """Facts of the libc at path (opened as given: /proc/PID/root/... or a
    map_files entry), which must be the file mapped, if given
    (files.check_mapped); root is the target's root, for its debug files."""
    st = stat_checked(path, mapped=mapped)
    return _facts(path, root, st.st_dev, st.st_ino, st.st_mtime_ns)
