"""Classify the target's mappings into roots, heap and memory to leave alone.

libmemunreachable classifies by mapping name (bionic names its heaps); glibc
names none of its arenas or thread stacks, so here the shim's registry and the
captured threads decide instead:

- heap: [heap], and in anonymous mappings holding a registered allocation
  the parts that are glibc's (arena heaps and mmap'ed chunks: glibc_heaps.py;
  the rest of such a mapping, merged into it by the kernel, is the program's
  and a root). Never a root: free chunks and tcache hold stale pointers that
  would hide leaks.
- the shim's own memory (the pieces the registry lists) and its ELF
  mappings: not roots.
- a live thread's stack: a root from SP (minus the red zone) to the top of its
  mapping, which also covers glibc's static TLS and struct pthread at the top.
  The part below SP is dead frames: not a root. The shim's helper thread's
  frames and registers hold the shim's values only (arena ranges, size-map
  pages): its stack is a root only above them, where the shim says.
- a stack glibc cached for an exited thread (the shim recorded its bounds, no
  live thread runs on it, and its top still holds the thread's control
  block: glibc unmaps stacks its cache cannot hold, and the program may map
  its own memory there): not a root.
- since glibc 2.42 a thread's guard page is a guard region inside its stack
  mapping (MADV_GUARD_INSTALL), not a PROT_NONE mapping of its own, so
  neighbouring thread stacks merge into one mapping. Such a mapping is cut
  at the stacks the shim recorded: a live thread's own, and an exited
  thread's whose top still holds a thread control block (bounds the shim
  recorded for a stack glibc has since unmapped name nothing).
- other readable private or shared memory that can hold data (writable ELF
  segments: .data, .bss, GOT; anonymous mappings: user pools, ld.so's memory,
  the main thread's TLS): a root. Read-only file mappings, [vvar], [vdso] and
  [vsyscall] cannot hold heap pointers written at run time and are skipped.
  Pages of anonymous roots that were never touched are zero and left out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from unreachable.allocations.registry import (
    THREAD_EXITED,
    THREAD_LIVE,
    Registry,
    check_regions,
)
from unreachable.capture.stop_world import CapturedThread
from unreachable.process.maps import SPECIAL, Mapping, find_mapping
from unreachable.process.memory import Memory
from unreachable.roots.exited_threads import control_block
from unreachable.roots.glibc_heaps import Span, registry_blocks_in, whole_mappings

RED_ZONE = 128  # x86-64 SysV ABI: leaf code may keep data below SP
# A helper frame boundary further above its SP is not on its stack.
HELPER_STACK_MAX = 1 << 24
# The parts of sorted (begin, end) ranges that hold pages (process/memory.py).
Present = Callable[[Sequence[tuple[int, int]]], list[tuple[int, int]]]
# Kinds of mapping that are never roots.
NOT_ROOTS = ("shim", "heap", "exited-thread stack", "read-only file")


@dataclass(slots=True, eq=False, repr=False)
class Roots:
    """The ranges of memory that are roots, each with its kind."""

    ranges: list[tuple[int, int]] = field(default_factory=list)
    range_kinds: list[str] = field(default_factory=list)  # each range's kind, in order
    kinds: Counter[str] = field(default_factory=Counter)  # bytes per kind of region
    holes: list[tuple[int, int]] = field(default_factory=list)  # never roots
    dead_stacks: list[Mapping] = field(default_factory=list)
    # Their control blocks' DTV words, from the one read that found each
    # block: a copy-on-write snapshot's unsaved page read once is the
    # snapshot's or counted lost (copy_snapshot.cow_broken), a second read
    # after the target unmapped the stack would be neither.
    dead_dtvs: list[int] = field(default_factory=list)

    def add(self, kind: str, begin: int, end: int) -> None:
        for hole_begin, hole_end in self.holes:
            if hole_begin < end and hole_end > begin:
                self.add(kind, begin, hole_begin)
                self.kinds["allocator state"] += min(end, hole_end) - max(begin, hole_begin)
                self.add(kind, hole_end, end)
                return
        if end > begin:
            self.ranges.append((begin, end))
            self.range_kinds.append(kind)
            self.kinds[kind] += end - begin

    def skip(self, kind: str, m: Mapping) -> None:
        self.kinds[kind] += m.end - m.start


def classify(
    mappings: list[Mapping],
    thread_sps: dict[int, int],
    registry: Registry,
    shim_path: str,
    allocator_state: Sequence[tuple[int, int]] = (),
    heap: dict[Mapping, list[Span]] | None = None,
    present: Present | None = None,
    memory: Memory | None = None,
) -> Roots:
    """Root ranges of the target; thread_sps maps every captured tid to its SP.

    allocator_state: ranges inside otherwise-root mappings that belong to the
    allocator (glibc's main_arena, the shim's .bss past its file's pages) and
    are cut out of the roots.
    heap: the parts of anonymous mappings that are glibc's heap
    (glibc_heaps.heap_parts); by default every mapping a registered block
    begins in, whole.
    present: the parts of anonymous ranges that hold pages; the rest was never
    touched, is zero, and is left out (counted as "untouched").
    memory: the target's, to tell an exited thread's stack inside a larger
    mapping (glibc 2.42's merged stacks) from one glibc has unmapped; without
    it such a stack is not cut out (only live threads' are).
    """
    if heap is None:
        heap = whole_mappings(mappings, registry_blocks_in(registry))
    mappings, heap = split_at_stacks(
        mappings, heap, recorded_stacks(mappings, registry, thread_sps, memory)
    )
    # A piece of the shim's memory the kernel merged with a neighbour of the
    # same protection is cut out of it, as the allocator's state is.
    check_regions(registry, mappings)
    roots = Roots(holes=sorted([*allocator_state, *registry.regions]))
    stacks = live_stacks(mappings, thread_sps, heap)
    exited = exited_stack_bounds(registry, thread_sps)
    blocks: dict[Mapping, tuple[int, int]] = {}
    kinds = {
        m: _kind(m, registry, shim_path, stacks, heap, (exited, blocks), memory)
        for m in mappings
        if m.readable and m.path not in SPECIAL
    }
    for m, kind in kinds.items():
        if kind in NOT_ROOTS:
            roots.skip(kind, m)
        if kind == "exited-thread stack":
            roots.dead_stacks.append(m)
            if m in blocks:
                roots.dead_dtvs.append(blocks[m][1])

    def of(kind: str) -> list[Mapping]:
        return [m for m, k in kinds.items() if k == kind]

    thread_stacks(roots, of("stack"), stacks, heap)
    elf_segments(roots, of("globals"))
    anonymous_maps(roots, of("anonymous"), heap, present)
    return roots


def stack_sps(threads: Sequence[CapturedThread], registry: Registry) -> dict[int, int]:
    """Each captured thread's SP, where the roots of its stack begin (less the
    red zone); the shim's helper's from above its frames while it publishes
    them (they hold the shim's values only, native/shim/helper.c)."""
    sps = {t.tid: t.sp for t in threads}
    top, tid = registry.helper_frames, registry.helper_tid
    if top and tid in sps and 0 <= top - sps[tid] < HELPER_STACK_MAX:
        sps[tid] = top + RED_ZONE
    return sps


def live_stacks(
    mappings: list[Mapping], thread_sps: dict[int, int], heap: dict[Mapping, list[Span]]
) -> dict[Mapping, int]:
    """Each live thread's stack mapping and the lowest SP (less the red
    zone) in it; not a thread running on a stack it allocated."""
    lowest: dict[Mapping, int] = {}
    for sp in thread_sps.values():
        m = find_mapping(mappings, sp - RED_ZONE) or find_mapping(mappings, sp)
        if m is not None and not _in_heap(m, sp, heap):
            lowest[m] = min(sp - RED_ZONE, lowest.get(m, m.end))
    return lowest


def exited_stack_bounds(registry: Registry, thread_sps: dict[int, int]) -> set[tuple[int, int]]:
    """The stacks the shim recorded for threads that exited (glibc caches
    them for reuse) and that no live thread runs on."""
    return {
        (t.stack_lo, t.stack_hi)
        for t in registry.threads
        if t.state == THREAD_EXITED and t.stack_hi and t.tid not in thread_sps
    }


def recorded_stacks(
    mappings: list[Mapping],
    registry: Registry,
    thread_sps: dict[int, int],
    memory: Memory | None,
) -> list[tuple[int, int]]:
    """The stack bounds the shim recorded that lie strictly inside an
    anonymous mapping and still name a thread's stack: live threads'
    (captured now), and exited threads' whose top still holds a thread
    control block. An exited one overlapping a live one is stale."""
    live = {
        (t.stack_lo, t.stack_hi)
        for t in registry.threads
        if t.state == THREAD_LIVE and t.stack_hi and t.tid in thread_sps
    }
    found = [b for b in live if _strictly_inside(mappings, b)]
    if memory is not None:
        for lo, hi in exited_stack_bounds(registry, thread_sps) - live:
            if any(b < hi and e > lo for b, e in live) or not _strictly_inside(mappings, (lo, hi)):
                continue
            if control_block(memory, lo, hi) is not None:
                found.append((lo, hi))
    return sorted(found)


def _strictly_inside(mappings: list[Mapping], bounds: tuple[int, int]) -> bool:
    m = find_mapping(mappings, bounds[0])
    return m is not None and m.anonymous and bounds[1] <= m.end and bounds != (m.start, m.end)


def split_at_stacks(
    mappings: list[Mapping], heap: dict[Mapping, list[Span]], stacks: list[tuple[int, int]]
) -> tuple[list[Mapping], dict[Mapping, list[Span]]]:
    """Anonymous mappings cut at the thread stacks that lie strictly inside
    them, each stack a piece of its own (the guard regions between them are
    pieces too, the program's memory as before: their reads fail, as an
    unreadable page's do); heap spans go with their piece."""
    if not stacks:
        return mappings, heap
    out: list[Mapping] = []
    pieces_heap: dict[Mapping, list[Span]] = {}
    for m in mappings:
        inside = [(lo, hi) for lo, hi in stacks if m.start <= lo and hi <= m.end]
        if not inside or heap.get(m) == [(m.start, m.end)]:
            out.append(m)
            if m in heap:
                pieces_heap[m] = heap[m]
            continue
        cuts: list[Span] = []
        at = m.start
        for lo, hi in inside:
            if lo < at:  # overlaps the previous one: stale bounds
                continue
            cuts += [(at, lo), (lo, hi)]
            at = hi
        cuts.append((at, m.end))
        for begin, end in cuts:
            if end <= begin:
                continue
            piece = replace(m, start=begin, end=end)
            out.append(piece)
            spans = [
                (max(b, begin), min(e, end)) for b, e in heap.get(m, []) if b < end and e > begin
            ]
            if spans:
                pieces_heap[piece] = spans
    return out, pieces_heap


def _kind(
    m: Mapping,
    registry: Registry,
    shim_path: str,
    stacks: dict[Mapping, int],
    heap: dict[Mapping, list[Span]],
    exited: tuple[set[tuple[int, int]], dict[Mapping, tuple[int, int]]],
    memory: Memory | None,
) -> str:
    """What a readable mapping holds, first match wins. exited: the bounds
    of exited threads' stacks, and where each control block found goes."""
    if any(begin <= m.start and m.end <= end for begin, end in registry.regions):
        return "shim"
    if m.path == shim_path:
        return "shim"
    if m in stacks:
        return "stack"
    if m.path == "[heap]" or heap.get(m) == [(m.start, m.end)]:
        return "heap"
    if m.anonymous and _is_dead_stack(m, *exited, memory):
        return "exited-thread stack"
    if m.anonymous or m.path.startswith("[stack"):
        return "anonymous"
    if m.writable:
        return "globals"
    return "read-only file"


def thread_stacks(
    roots: Roots,
    mappings: list[Mapping],
    lowest: dict[Mapping, int],
    heap: dict[Mapping, list[Span]],
) -> None:
    """Live threads' stacks, from SP (less the red zone) to the top of the
    mapping: their frames, and glibc's static TLS and struct pthread at the
    top. The part below SP is dead frames. Before Linux 6.7 a thread's stack
    can merge with a chunk glibc maps right above it: that part is heap."""
    for m in mappings:
        at = max(lowest[m], m.start)
        for begin, end in heap.get(m, []):
            if end > at:
                roots.add("stack", at, begin)
                roots.kinds["heap"] += end - max(begin, at)
                at = end
        roots.add("stack", at, m.end)


def elf_segments(roots: Roots, mappings: list[Mapping]) -> None:
    """Writable file mappings: .data, .bss and the GOT of every object."""
    for m in mappings:
        roots.add("globals", m.start, m.end)


def anonymous_maps(
    roots: Roots,
    mappings: list[Mapping],
    heap: dict[Mapping, list[Span]],
    present: Present | None,
) -> None:
    """Anonymous memory that is not heap: user pools, ld.so's memory, the
    main thread's TLS, the parts of a mapping the kernel merged with the
    heap. Of private memory only the pages that exist are read: one query
    for all of them, so a sparse reservation (64 GiB reserved, a few pages
    used) is as cheap to scan as the pages it uses."""
    anonymous: list[Span] = []
    for m in mappings:
        at = m.start
        for begin, end in heap.get(m, []):
            roots.kinds["heap"] += end - begin
            _program_memory(m, at, begin, roots, anonymous)
            at = end
        _program_memory(m, at, m.end, roots, anonymous)
    spans = sorted(anonymous)
    used = present(spans) if present and spans else spans
    for begin, end in used:
        roots.add("anonymous", begin, end)
    untouched = sum(e - b for b, e in spans) - sum(e - b for b, e in used)
    if untouched > 0:
        roots.kinds["untouched"] += untouched


def _program_memory(m: Mapping, begin: int, end: int, roots: Roots, private: list[Span]) -> None:
    if end <= begin:
        return
    if m.private:
        private.append((begin, end))
    else:
        roots.add("anonymous", begin, end)


def _in_heap(m: Mapping, sp: int, heap: dict[Mapping, list[Span]]) -> bool:
    """Whether a thread runs on a stack it allocated (a coroutine's, a
    malloc'ed sigaltstack): its SP lies in a block, and the heap above it in
    the mapping is no stack (taken for one, every block up there was a root).
    The block itself stays alive through SP, a register value, and is
    scanned whole as a block."""
    return m.path == "[heap]" or any(b <= sp < e for b, e in heap.get(m, []))


def _is_dead_stack(
    m: Mapping,
    dead: set[tuple[int, int]],
    found: dict[Mapping, tuple[int, int]],
    memory: Memory | None,
) -> bool:
    # glibc's pthread_getattr_np reports the stack without its guard page, and
    # before 2.42 the guard is its own PROT_NONE mapping, so the bounds match
    # exactly; a stack inside a larger mapping is a piece of its own by now.
    if not ((m.start, m.end) in dead or any(lo >= m.start and hi == m.end for lo, hi in dead)):
        return False
    # glibc unmaps a stack its cache cannot hold, and the program may map its
    # own memory there: a cached stack still ends in its control block.
    if memory is None:
        return True
    block = control_block(memory, m.start, m.end)
    if block is not None:
        found[m] = block
    return block is not None


def register_words(regsets: list[bytes]) -> bytes:
    """Every register word of every thread, general and vector, as value roots."""
    out = bytearray()
    for regs in regsets:
        usable = len(regs) - len(regs) % 8
        out += regs[:usable]
    return bytes(out)
