"""What a leak is when no backtrace says where it came from: its C++ class,
and the other leaks of its size and class folded into it.

A C++ object with virtual functions starts with its vptr, which on x86-64
(Itanium C++ ABI) points into the object `vtable for X` (`_ZTV...` in the
ELF symbol tables), past its offset-to-top and typeinfo words: 16 bytes in
for the primary vtable, further for a class with virtual bases. A leak whose
first word is an aligned address in [vtable + 16, vtable end) of a vtable
symbol of a mapped file is named after that class (as chap names objects in
cores). Any other first word leaves the type unknown ("").

Leaks without a backtrace (stack id 0) are folded by (size, type) as
fold/dedup.py folds the others by backtrace: the first in address order
keeps its address and absorbs the rest into its similar_* fields. When the
contents of every entry were asked for, they are not folded: each block's
bytes are shown, and suppression rules that name contents match each block.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Callable
from dataclasses import dataclass

from unreachable import _native
from unreachable.fold.dedup import Leak, dedup
from unreachable.process.mapped_file import file_for, fs_root
from unreachable.process.maps import Mapping
from unreachable.process.memory import Memory, memory_reader
from unreachable.symbolize.cache import ObjectCache, object_key
from unreachable.symbolize.config import default_cache_dir
from unreachable.symbolize.elf_file import NotElf, read_elf

VTABLE_PREFIX = "_ZTV"
VTABLE_DEMANGLED = "vtable for "
# Offset-to-top and the typeinfo pointer come before the first virtual slot.
FIRST_SLOT = 16
# First words read to name plain leaks: past this many (each is a read of
# the target's memory), plain leaks are folded by size alone.
MAX_TYPED = 1 << 20
_WORD = struct.Struct("<Q")


@dataclass(slots=True, eq=False, repr=False)
class Vtables:
    """Every vtable symbol of the mapped files, at its address in the
    process, sorted by start."""

    starts: list[int]
    ends: list[int]
    names: list[str]  # demangled class names

    def type_of(self, word: int) -> str:
        if word % 8:
            return ""
        i = bisect.bisect_right(self.starts, word - FIRST_SLOT) - 1
        if i >= 0 and word < self.ends[i]:
            return self.names[i]
        return ""


# One ELF object's vtables: (link-time start, end, class name) each.
FileVtables = list[tuple[int, int, str]]
# The on-disk cache's entry name (symbolize/cache.py), beside the symbolizer's.
CACHE_ENTRY = "vtables"


def _cached(cache: ObjectCache) -> FileVtables | None:
    """The entry, or None: missing, or not what _save writes (any file in
    the cache directory is input, not trusted)."""
    entry = cache.load(CACHE_ENTRY)
    if not isinstance(entry, list):
        return None
    out: FileVtables = []
    for item in entry:
        if not (isinstance(item, list) and len(item) == 3):
            return None
        start, end, name = item
        if not (isinstance(start, int) and isinstance(end, int) and isinstance(name, str)):
            return None
        out.append((start, end, name))
    return out


def _file_vtables(path: str, identity: tuple[int, ...]) -> FileVtables:
    """The vtable symbols of one file (mangled names), from its .symtab when
    it has one, else the ones .dynsym exports."""
    # Imported on a cache miss only: a scan's imports are part of its time.
    from unreachable.symbolize.data_symbols import load_data_symbols

    # The file whose headers named the cache entry (a swap since is refused).
    symbols = load_data_symbols(path, (identity[0], identity[1]))
    if symbols is None:
        return []
    return [
        (start, end, name)
        for start, end, name in zip(symbols.starts, symbols.ends, symbols.names, strict=True)
        if name.startswith(VTABLE_PREFIX)
    ]


def load_vtables(pid: int, mappings: list[Mapping]) -> Vtables:
    """The vtables of every file mapped in pid (its .symtab when it has one,
    else the vtables .dynsym exports). Each file's, demangled, is kept in
    the on-disk symbol cache under its build-id and identity
    (symbolize/cache.py): reading its symbols in Python, and demangling them in a c++filt
    process, took milliseconds of every scan; a rebuilt file has a key of
    its own."""
    root = fs_root(pid)
    cache_dir = default_cache_dir()
    found: list[tuple[int, int, str]] = []
    misses: list[tuple[ObjectCache, int, FileVtables]] = []
    seen: set[str] = set()
    for m in mappings:
        if not m.path.startswith("/") or m.path in seen:
            continue
        seen.add(m.path)  # the lowest mapping of a file gives its load bias
        path, _, mapped = file_for(pid, m, root)
        try:
            image = read_elf(path, mapped=mapped)
            bias = m.start - image.file_offset_to_vaddr(m.offset)
        except (OSError, NotElf, ValueError):
            continue
        cache = ObjectCache(cache_dir, f"{object_key(image)}-{CACHE_ENTRY}")
        vtables = _cached(cache)
        if vtables is None:
            misses.append((cache, bias, _file_vtables(path, image.identity)))
            continue
        found += [(start + bias, end + bias, name) for start, end, name in vtables]
    # Every file read afresh is demangled in one batch (one c++filt),
    # imported only when one of them has a vtable (a C program's have
    # none), as its subprocess module is.
    names: dict[str, str] = {}
    if mangled := {name for _, _, vtables in misses for _, _, name in vtables}:
        from unreachable.symbolize.demangle import demangle_all

        names = demangle_all(mangled)
    for cache, bias, vtables in misses:
        named = [(start, end, names[n]) for start, end, n in vtables]
        # Not kept when a name stayed mangled (no c++filt here): a later
        # scan may do better.
        if all(name.startswith(VTABLE_DEMANGLED) for _, _, name in named):
            cache.save(CACHE_ENTRY, [list(v) for v in named])
        found += [(start + bias, end + bias, name) for start, end, name in named]
    found.sort()
    return Vtables(
        [s for s, _, _ in found],
        [e for _, e, _ in found],
        [name.removeprefix(VTABLE_DEMANGLED) for _, _, name in found],
    )


def _first_word(read: Callable[[int, int], bytes], addr: int) -> int | None:
    try:
        raw = read(addr, 8)
    except OSError:
        return None
    return _WORD.unpack(raw)[0] if len(raw) == 8 else None


def _before(leak: Leak) -> tuple[int, int]:
    return (-leak.total_size, leak.begin)


def fold_leaks(
    leaks: bytes | memoryview,
    limit: int,
    memory: Memory,
    pid: int,
    mappings: list[Mapping],
    by_type: bool,
) -> tuple[list[Leak], dict[int, str]]:
    """The report's entries (largest total first, at most limit) and the
    type of each entry's first block by its address ("" left out). by_type
    False: plain leaks stay one entry each (fold/dedup.py's rule)."""
    if limit <= 0:
        return [], {}
    raw = memoryview(leaks).cast("B")
    records = _native.abi_decode_array("ur_leak_record", raw)
    record_size = _native.abi_sizeof("ur_leak_record")
    count = len(records)
    plain_count = sum(1 for r in records if not r["stack_id"]) if by_type else 0
    if not plain_count:
        entries = dedup(leaks, limit)
        return entries, _types_of(entries, memory, pid, mappings, set())
    vtables = load_vtables(pid, mappings)
    typed = bool(vtables.starts) and plain_count <= MAX_TYPED
    traced = bytearray()
    groups: dict[tuple[int, str], Leak] = {}
    with memory_reader(memory) as read:
        for i, record in enumerate(records):
            begin, size = record["begin"], record["size"]
            ref_count, ref_size = record["referenced_count"], record["referenced_size"]
            if record["stack_id"]:
                traced += raw[i * record_size : (i + 1) * record_size]
                continue
            word = _first_word(read, begin) if typed else None
            key = (size, vtables.type_of(word) if word is not None else "")
            first = groups.get(key)
            if first is None:
                groups[key] = Leak(begin, size, 0, ref_count, ref_size)
                continue
            first.similar_count += 1
            first.similar_size += size
            first.similar_referenced_count += ref_count
            first.similar_referenced_size += ref_size
    entries = dedup(bytes(traced), limit) if plain_count < count else []
    entries = sorted([*entries, *groups.values()], key=_before)[:limit]
    folded = {first.begin: kind for (_size, kind), first in groups.items()}
    types = _types_of(entries, memory, pid, mappings, set(folded), vtables)
    return entries, types | {a: t for a, t in folded.items() if t}


def _types_of(
    entries: list[Leak],
    memory: Memory,
    pid: int,
    mappings: list[Mapping],
    skip: set[int],
    vtables: Vtables | None = None,
) -> dict[int, str]:
    """The type of each entry's first block, read from its first word."""
    wanted = [e.begin for e in entries if e.begin not in skip]
    if not wanted:
        return {}
    vtables = vtables or load_vtables(pid, mappings)
    if not vtables.starts:
        return {}
    out: dict[int, str] = {}
    with memory_reader(memory) as read:
        for addr in wanted:
            word = _first_word(read, addr)
            if word is not None and (kind := vtables.type_of(word)):
                out[addr] = kind
    return out
