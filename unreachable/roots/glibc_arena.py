"""Find glibc's main_arena so it is not scanned as a root.

main_arena is allocator state living in libc's .data, and it points into the
heap: `top` points at the header of the top chunk, which is the last 8 bytes
of the block allocated just before it (glibc lends the next chunk's prev_size
field to the block below). Scanned as a root, it would keep the most recent
allocation alive. glibc exports no symbol for it, so it is found by its
fingerprint: an empty bin's fd and bk both point at the bin itself, and most
of the 127 bins of a running program are empty.

Layout of struct malloc_state on x86-64, glibc 2.26 to 2.42: mutex, flags,
have_fastchunks (3 ints + pad), fastbinsY[10] at 0x10, top at 0x60,
last_remainder 0x68, bins[254] at 0x70, binmap at 0x860, next 0x870,
next_free 0x878, attached_threads, system_mem, max_system_mem; size 0x898.
2.43 took have_fastchunks and fastbinsY out: bins at 0x18, next at 0x818,
size 0x840 (glibc_libc.arena_layout). From the bins on, both are the same,
so the fingerprint finds the bins whatever the release, and which layout
holds is told by where the arenas' `next` list comes back to: main_arena's
own address.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from itertools import compress

from unreachable.allocations.glibc_libc import arena_layout
from unreachable.process.maps import Mapping
from unreachable.process.memory import Memory, memory_reader, read_anonymous

NBINS = 128
# bins[254] and binmap[4] lie between the bins and `next` in every layout.
NEXT_AFTER_BINS = (NBINS - 1) * 16 + 16
# top and last_remainder lie just below the bins in every layout.
BELOW_BINS = 16
# (offset of the bins, sizeof) of every layout, the smallest arena first.
LAYOUTS = sorted(
    {(next_at - NEXT_AFTER_BINS, size) for size, next_at, _ in map(arena_layout, (42, 43))}
)
ABOVE_BINS = LAYOUTS[0][1] - LAYOUTS[0][0]  # the bins to the arena's end, in every layout
MIN_EMPTY_BINS = 48  # of 127; a fresh process has ~125 empty
MAX_ARENAS = 4096  # a list longer than this is no arena list


def _empty_slots(words: tuple[int, ...], begin: int) -> tuple[list[bool], list[bool]]:
    """Per word of the region at begin: whether it holds its own address
    less 16, as an empty bin's fd does; and whether the next word holds the
    same, as that bin's bk does. Either depends on the word alone, not on
    where the arena would start, so it is found once for every candidate
    (a loop per candidate and bin was 3 ms of every scan)."""
    addrs = range(begin - 16, begin - 16 + 8 * len(words), 8)
    fd = [w == a for w, a in zip(words, addrs, strict=True)]
    both = [f and bk == a for f, bk, a in zip(fd[:-1], words[1:], addrs[:-1], strict=True)]
    return fd, both


def _empty_bins(empty: list[bool], at: int) -> int:
    """The empty bins of the arena whose bin 1 is word at."""
    return sum(empty[at : at + 2 * (NBINS - 1) : 2])


def find_main_arena(memory: Memory, mappings: list[Mapping]) -> tuple[int, int] | None:
    """[begin, end) of main_arena in libc's writable data, or None."""
    libc = [m for m in mappings if "/libc.so" in m.path or "/libc-" in m.path]
    data = [m for m in libc if m.writable and m.readable]
    if not data:
        return None
    # .data and the .bss that follows it are one region to search.
    begin = data[0].start
    end = data_end = max(m.end for m in data)
    for m in mappings:
        if m.start == end and m.anonymous and m.writable:
            end = m.end
    try:
        with memory_reader(memory) as read:
            raw = read(begin, data_end - begin)
    except OSError:
        return None
    raw += read_anonymous(memory, data_end, end)
    words = struct.unpack(f"<{len(raw) // 8}Q", raw[: len(raw) // 8 * 8])
    probe = (NBINS - 2) * 16  # the largest bin: empty in practice
    # The fingerprint repeats: bins k bins (16k bytes) below the arena's see
    # their bin i as the arena's bin i - k, so it matches wherever those are
    # empty, and a program whose main-arena bins are all empty (a JVM) had
    # the first of them, 79 bins low, taken: the cut-out then hid libc data
    # below the arena (__exit_funcs: its atexit block reported leaked) and
    # left the arena scanned. The arena itself matches one bin more than any
    # shifted copy (its largest bin, the probe), so the most matches win.
    best: tuple[int, int] | None = None
    fd, slots = _empty_slots(words, begin)
    lo, hi = BELOW_BINS // 8, len(words) - ABOVE_BINS // 8
    for probed in compress(range(len(words)), fd):
        at = probed - probe // 8
        if not lo <= at < hi:
            continue
        bins_addr = begin + at * 8
        empty = _empty_bins(slots, at)
        if empty >= MIN_EMPTY_BINS and (best is None or empty > best[0]):
            best = (empty, bins_addr)
    if best is None:
        return None
    with memory_reader(memory) as read:
        return _arena(read, best[1])


def _arena(read: Callable[[int, int], bytes], bins_addr: int) -> tuple[int, int]:
    """[begin, end) of the arena whose bins lie at bins_addr: the layout
    whose base the `next` list comes back to. Where none does (a list being
    read mid-update), the smallest, which holds in every layout: cutting
    out libc data that is not the arena could hide the roots it holds."""
    for bins_at, size in LAYOUTS:
        base = bins_addr - bins_at
        if _list_returns_to(read, base, bins_at + NEXT_AFTER_BINS):
            return base, base + size
    bins_at, size = LAYOUTS[0]
    return bins_addr - bins_at, bins_addr - bins_at + size


def _list_returns_to(read: Callable[[int, int], bytes], base: int, next_at: int) -> bool:
    """Whether following `next` from the arena at base comes back to it:
    the list of arenas is a ring through main_arena (itself alone, with no
    other arena)."""
    at, seen = base, set[int]()
    while len(seen) < MAX_ARENAS:
        try:
            (at,) = struct.unpack("<Q", read(at + next_at, 8))
        except (OSError, struct.error):
            return False
        if at == base:
            return True
        if at == 0 or at in seen:  # the wrong layout's words lead elsewhere
            return False
        seen.add(at)
    return False
