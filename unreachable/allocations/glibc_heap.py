"""The allocations of a process without the shim: glibc's heap, walked from
a copy of its memory (native/scanner/glibc_heap.c, docs/glibc-heap.md).

Before anything is stopped, the process must be one whose malloc is glibc's:
a libc.so.6 mapped, and no other allocator's library (jemalloc, tcmalloc,
mimalloc) mapped to take malloc's place. Then, from the copy: libc's facts
(glibc_libc.py) at its load bias, each thread's `tcache` through its thread
pointer, and the walk, which proves itself or refuses.
"""

from __future__ import annotations

import os
import re
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from unreachable import _native
from unreachable.allocations.glibc_libc import LibcFacts, LibcUnsupported, libc_facts
from unreachable.errors import TargetNotShimmed
from unreachable.process.mapped_file import file_for, mapped_path
from unreachable.process.maps import Mapping
from unreachable.process.memory import Memory, memory_reader, present_ranges

LIBC = re.compile(r"^libc(\.so\.6|-2\.\d+\.so)$")
MUSL = re.compile(r"^(ld-musl-.*\.so\.1|libc\.musl-.*\.so\.1)$")
OTHER_ALLOCATORS = {
    "libjemalloc": "jemalloc",
    "libtcmalloc": "tcmalloc",
    "libmimalloc": "mimalloc",
    "libhoard": "Hoard",
    "librpmalloc": "rpmalloc",
    "libsnmalloc": "snmalloc",
}
# glibc 2.minor releases whose layouts the walk knows (native/scanner/glibc_heap.c)
MINORS = range(31, 44)
KNOWN = f"2.{MINORS[0]} to 2.{MINORS[-1]}"
UNDER_SHIM = "run it under the shim: 'unreachable-cli run -- CMD ...'"
# How far below its stack mapping's end a thread's struct pthread and static
# TLS may lie: they sit in the top pages.
SEARCH_TOP = 64 * 1024
PAGE = os.sysconf("SC_PAGE_SIZE")


class HeapBusy(Exception):
    """A thread was inside malloc: the heap may be mid-update."""


class HeapWalkFailed(Exception):
    """The walk refused the heap (a check failed); the message says which."""


@dataclass(frozen=True, slots=True)
class GlibcLibc:
    mapping: Mapping
    bias: int
    facts: LibcFacts

    @property
    def malloc_code(self) -> tuple[int, int]:
        lo, hi = self.facts.malloc_code
        return (lo + self.bias, hi + self.bias) if hi else (0, 0)

    def describe(self) -> str:
        return f"glibc {self.facts.version}"


def not_glibc_malloc(mappings: Sequence[Mapping]) -> str:
    """What allocates instead of glibc's malloc, or "" when glibc's does."""
    names = {os.path.basename(mapped_path(m)) for m in mappings if m.path.startswith("/")}
    for name in sorted(names):
        for prefix, what in OTHER_ALLOCATORS.items():
            if name.startswith(prefix):
                return f"it allocates with {what} ({name})"
    if any(MUSL.match(n) for n in names):
        return "it uses musl's libc, whose malloc cannot be walked"
    if not any(LIBC.match(n) for n in names):
        return "no glibc libc.so.6 is mapped (a static binary, or another libc)"
    return ""


def refuse_not_glibc(pid: int, mappings: Sequence[Mapping]) -> None:
    """Raises TargetNotShimmed with one line when something else than
    glibc's malloc allocates in the process."""
    if why := not_glibc_malloc(mappings):
        raise TargetNotShimmed(
            f"pid {pid} is not running under the unreachable shim and its heap cannot be"
            f" walked without it: {why}; {UNDER_SHIM}"
        )


def find_libc(pid: int, mappings: Sequence[Mapping]) -> GlibcLibc:
    """glibc's libc in the process, its facts and load bias. Raises
    TargetNotShimmed with one line when its malloc cannot be walked."""
    refuse_not_glibc(pid, mappings)
    first = next(
        m for m in mappings if m.offset == 0 and LIBC.match(os.path.basename(mapped_path(m)))
    )
    root = f"/proc/{pid}/root"
    path, exact, mapped = file_for(pid, first, root)
    if not exact:
        raise TargetNotShimmed(
            f"pid {pid} runs a libc replaced on disk since it started ({mapped_path(first)}),"
            f" and its mapped copy cannot be read; {UNDER_SHIM}"
        )
    try:
        facts = libc_facts(path, root, mapped)
    except (OSError, LibcUnsupported) as e:
        raise TargetNotShimmed(
            f"pid {pid}: glibc's heap cannot be walked without the shim ({mapped_path(first)}:"
            f" {e}); {UNDER_SHIM}"
        ) from None
    if facts.minor not in MINORS:
        raise TargetNotShimmed(
            f"pid {pid} uses glibc {facts.version}, whose heap layout is not known here"
            f" ({KNOWN} are); {UNDER_SHIM}"
        )
    # The first PT_LOAD maps file offset 0 at the link-time address 0 (a
    # shared object): its start is the load bias.
    return GlibcLibc(first, first.start, facts)


def _register(regs: bytes, name: str) -> int:
    """One register of a user_regs_struct (0 if regs ends before it)."""
    offset, size = _native.abi_field("user_regs_struct", name)
    if len(regs) < offset + size:
        return 0
    return int.from_bytes(regs[offset : offset + size], "little")


def thread_pointer(regs: bytes) -> int:
    return _register(regs, "fs_base")


def program_counter(regs: bytes) -> int:
    return _register(regs, "rip")


def tls_offsets(memory: Memory, libc: GlibcLibc) -> list[tuple[int, int]]:
    """(offset from the thread pointer, offset in libc's TLS block) of each
    of libc's TPOFF64 slots, as the loader filled them (read from the
    process: the GOT is read-only once relocated, and never copied; or from
    a core, which holds it)."""
    out = []
    with memory_reader(memory) as read:
        for slot, addend in libc.facts.tpoff_slots:
            try:
                raw = read(libc.bias + slot, 8)
            except OSError:
                continue
            if len(raw) == 8:
                out.append((struct.unpack("<q", raw)[0], addend))
    return out


_MIN_CHUNK = 32  # glibc's MINSIZE on 64-bit: a smaller rest stays in the chunk


def thread_tcaches(
    memory: Memory, libc: GlibcLibc, offsets: list[tuple[int, int]], tps: list[int]
) -> list[int]:
    """Each thread's `tcache` (0: none yet). With debug symbols the slot is
    the one they name; without, the one slot whose value in every thread is
    0 or a tcache chunk's user address (its header says 0x290; 0x300 from
    2.42, whose tcache has 76 bins; 16 more when glibc gave the whole of a
    free chunk whose rest was too small to split off: syslog-ng's worker
    threads had such), in one thread at least. From 2.43 a
    thread without a tcache points at a dummy in libc's own image: 0 too.
    Raises HeapWalkFailed when no slot, or more than one, qualifies."""
    chunk = 0x300 if libc.facts.minor >= 42 else 0x290
    dummy = (libc.bias, libc.bias + libc.facts.image_end) if libc.facts.minor >= 43 else (0, 0)
    with memory_reader(memory) as read:

        def word(addr: int) -> int | None:
            try:
                raw = read(addr, 8)
            except OSError:
                return None
            return struct.unpack("<Q", raw)[0] if len(raw) == 8 else None

        def values(tp_offset: int) -> list[int] | None:
            out = []
            for tp in tps:
                v = word((tp + tp_offset) % (1 << 64)) if tp else 0
                if v is None:
                    return None
                if dummy[0] <= v < dummy[1]:
                    v = 0
                if v:
                    header = word(v - 8) if v % 16 == 0 else None
                    if header is None or header & 2:
                        return None
                    if not chunk <= header & ~7 < chunk + _MIN_CHUNK:
                        return None
                out.append(v)
            return out

        named = libc.facts.tcache_tls
        fits, empty = [], False
        for tp_offset, addend in offsets:
            if named >= 0 and addend != named:
                continue
            got = values(tp_offset)
            if got is not None and (any(got) or named >= 0):
                fits.append(got)
            empty = empty or (got is not None and not any(got))
    if not fits and empty and named < 0:
        return [0] * len(tps)  # no thread has a tcache yet
    if len(fits) != 1:
        how = "its debug symbols' `tcache`" if named >= 0 else "which TLS slot is `tcache`"
        raise HeapWalkFailed(f"{libc.describe()}: cannot tell each thread's tcache ({how})")
    return fits[0]


def _joined(spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Adjacent spans as one: a chunk mmap'ed alone is one mmap, but the
    program's madvise or mprotect over part of it splits it into several
    mappings (numpy advises its large arrays onto huge pages past their
    header's page), and the walk looks for each chunk inside one span."""
    out: list[tuple[int, int]] = []
    for b, e in spans:
        if out and out[-1][1] == b:
            out[-1] = (out[-1][0], e)
        else:
            out.append((b, e))
    return out


def walk(
    memory: Memory,
    libc: GlibcLibc,
    tcaches: list[int],
    mappings: Sequence[Mapping],
) -> tuple[bytes, dict[str, int]]:
    """The live chunks: packed (user address, usable size) pairs in address
    order, and the walk's counts. Raises HeapBusy or HeapWalkFailed."""
    spans = _joined(
        (m.start, m.end)
        for m in mappings
        if m.readable and m.writable and m.private and m.inode == 0
    )
    anon = b"".join(struct.pack("<QQ", b, e) for b, e in spans)
    # A live process (a frozen snapshot child) is read through /proc: the
    # pages it lacks are not read, which would cost a read each (a 64 GiB
    # reservation: 16M) and map the zero page in.
    present = (
        (b"".join(struct.pack("<QQ", b, e) for b, e in present_ranges(memory, spans)),)
        if isinstance(memory, int)
        else ()
    )
    raw = _native.walk_glibc_heap(
        memory,
        libc.facts.minor,
        libc.bias + libc.facts.main_arena,
        libc.bias + libc.facts.mp,
        struct.pack(f"<{len(tcaches)}Q", *tcaches),
        anon,
        PAGE,
        *present,
    )
    if raw["busy"]:
        raise HeapBusy(raw["error"])
    if raw["error"]:
        raise HeapWalkFailed(f"{libc.describe()} ({libc.facts.how}): {raw['error']}")
    return raw["allocs"], {k: v for k, v in raw.items() if isinstance(v, int)}
