"""Which parts of the target's anonymous mappings are glibc's heap.

Linux merges neighbouring anonymous mappings that have the same
permissions, so a chunk glibc mmap'ed for one large block and memory the
program mapped itself (CPython's object arenas, a pool) can show as a single
mapping. Taken whole as heap, the program's part was no root: CPython under
the shim had ~800 blocks (1 MiB) reported leaked, all reachable from its
arenas. So the heap inside a mapping is found from glibc's own records:

- a non-main arena's heap: at a HEAP_MAX-aligned address, a heap_info
  {ar_ptr, prev, size, mprotect_size}; [heap, heap + mprotect_size) is its
  read-write part. The first heap of an arena holds the arena right after
  its heap_info (32 bytes before glibc 2.35, 48 since).
- a chunk mmap'ed for one block: the header before the block, (prev_size,
  size | IS_MMAPPED), spans [chunk - prev_size, chunk + size) (from glibc
  2.43, 16 bytes more, and prev_size's low bit marks huge pages).

A part that holds a block neither explains (main_arena's memory after brk
failed, a block a malloc_debug option moved, more blocks than are listed)
is taken as heap whole, as every such mapping was before.
"""

from __future__ import annotations

import bisect
import os
import struct
from collections.abc import Callable, Sequence

from unreachable.allocations.registry import Registry
from unreachable.process.maps import Mapping
from unreachable.process.memory import Memory, memory_reader, present_ranges

Span = tuple[int, int]
# For each range, the blocks that begin in it (ascending), or None when
# there are more than can be listed.
BlocksIn = Callable[[Sequence[Span]], list[list[int] | None]]

HEAP_MAX = 64 << 20  # 2 * DEFAULT_MMAP_THRESHOLD_MAX on 64-bit
HEAP_INFO_SIZES = (32, 48)  # sizeof(heap_info): glibc < 2.35, >= 2.35 (pagesize, padding)
IS_MMAPPED = 2
MAX_LISTED = 1 << 16  # blocks per range outside arena heaps: mmap'ed chunks
PAGE = os.sysconf("SC_PAGE_SIZE")


def registry_blocks_in(registry: Registry) -> BlocksIn:
    def blocks_in(ranges: Sequence[Span]) -> list[list[int] | None]:
        out: list[list[int] | None] = []
        n = registry.count
        for begin, end in ranges:
            i = bisect.bisect_left(range(n), begin, key=registry.begin)
            j = bisect.bisect_left(range(n), end, lo=i, key=registry.begin)
            out.append([registry.begin(k) for k in range(i, j)] if j - i <= MAX_LISTED else None)
        return out

    return blocks_in


def heap_parts(
    memory: Memory, mappings: Sequence[Mapping], blocks_in: BlocksIn
) -> dict[Mapping, list[Span]]:
    """For each readable anonymous mapping with a registered block in it:
    the parts of it that are glibc's heap, ascending."""
    anonymous = [m for m in mappings if m.readable and m.anonymous]
    try:
        with memory_reader(memory) as read:
            arenas = _arena_heaps(memory, read, anonymous)
            rest = [(m, span) for m in anonymous for span in _minus(m, arenas.get(m, []))]
            listed = blocks_in([span for _, span in rest])
            parts = {m: list(spans) for m, spans in arenas.items()}
            for (m, span), blocks in zip(rest, listed, strict=True):
                if blocks:
                    parts.setdefault(m, []).extend(_mmapped_chunks(read, m, span, blocks))
                elif blocks is None:
                    parts.setdefault(m, []).append(span)
    except OSError:
        # The process is going away (the sweep that follows says so): until
        # then, the rule without memory to read.
        return whole_mappings(mappings, blocks_in)
    return {m: sorted(spans) for m, spans in parts.items() if spans}


def whole_mappings(mappings: Sequence[Mapping], blocks_in: BlocksIn) -> dict[Mapping, list[Span]]:
    """Without memory to read: every anonymous mapping a block begins in,
    whole."""
    anonymous = [m for m in mappings if m.readable and m.anonymous]
    listed = blocks_in([(m.start, m.end) for m in anonymous])
    return {m: [(m.start, m.end)] for m, b in zip(anonymous, listed, strict=True) if b != []}


def _arena_heaps(
    memory: Memory, read: Callable[[int, int], bytes], anonymous: list[Mapping]
) -> dict[Mapping, list[Span]]:
    probes = [
        (a, m)
        for m in anonymous
        for a in range(-(-m.start // HEAP_MAX) * HEAP_MAX, m.end, HEAP_MAX)
    ]
    if not probes:
        return {}
    # A heap_info page was written; reading an absent one would fault it in.
    present = {b for b, _ in present_ranges(memory, [(a, a + PAGE) for a, _ in probes])}
    found: dict[Mapping, list[Span]] = {}
    for a, m in probes:
        if a not in present:
            continue
        try:
            raw = read(a, 32)
        except OSError:
            continue
        if len(raw) < 32:
            continue
        ar_ptr, prev, size, mprotect_size = struct.unpack("<4Q", raw)
        if not (0 < size <= mprotect_size <= HEAP_MAX and (size | mprotect_size) % PAGE == 0):
            continue
        first = prev == 0 and ar_ptr - a in HEAP_INFO_SIZES
        later = prev and prev % HEAP_MAX == 0 and ar_ptr % HEAP_MAX in HEAP_INFO_SIZES
        if first or later:
            found.setdefault(m, []).append((a, min(a + mprotect_size, m.end)))
    return found


def _minus(m: Mapping, holes: list[Span]) -> list[Span]:
    out, at = [], m.start
    for b, e in sorted(holes):
        if b > at:
            out.append((at, b))
        at = max(at, e)
    if at < m.end:
        out.append((at, m.end))
    return out


def _mmapped_chunks(
    read: Callable[[int, int], bytes], m: Mapping, span: Span, blocks: list[int]
) -> list[Span]:
    """The chunks glibc mmap'ed for blocks, or the whole span when a block
    is not in one."""
    chunks: list[Span] = []
    for block in blocks:
        if chunks and block < chunks[-1][1]:
            continue  # a block inside the last chunk: its header is not glibc's
        chunk = block - 16
        try:
            raw = read(chunk, 16)
        except OSError:
            return [span]
        if len(raw) < 16:
            return [span]
        prev_size, size = struct.unpack("<2Q", raw)
        # From glibc 2.43 the chunk ends 16 bytes short of its mapping and
        # prev_size's low bit says the mapping is of huge pages.
        begin, end = chunk - (prev_size & ~1), chunk + (size & ~7)
        if end % PAGE:
            end += 16
        if not (
            size & IS_MMAPPED
            and begin % PAGE == 0
            and (end - begin) % PAGE == 0
            and m.start <= begin < end <= m.end
        ):
            return [span]
        chunks.append((begin, end))
    return chunks
