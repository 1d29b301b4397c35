"""The glibc heap as an allocation source: the live chunks a walk found
(glibc_heap.py), over a copy of a process without the shim or a core."""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from unreachable.allocations.glibc_heap import SEARCH_TOP, thread_pointer
from unreachable.allocations.registry import THREAD_EXITED, Registry, ThreadSlot
from unreachable.capture.stop_world import CapturedThread
from unreachable.process.maps import Mapping
from unreachable.process.memory import Memory, memory_reader

# struct pthread fits in this many words (about 2.3 KiB on x86-64); its
# stackblock and stackblock_size lie in it.
PTHREAD_WORDS = 512


@dataclass(frozen=True, slots=True)
class GlibcHeap:
    allocs: bytes  # packed u64 (begin, usable size) per live chunk, in address order
    # False where the mappings do not list PROT_NONE guards (gdb's cores).
    guards: bool = True
    name: str = "glibc heap"

    def registry(
        self,
        memory: Memory,
        mappings: Sequence[Mapping],
        threads: Sequence[CapturedThread],
        entries: bool = True,
    ) -> Registry:
        n = len(self.allocs) // 16
        return Registry(
            allocs=memoryview(self.allocs).cast("Q"),
            stack_ids=memoryview(bytes(4 * n)).cast("I"),
            threads=cached_stacks(memory, mappings, threads, self.guards),
            locked_shards=[],
            helper_tid=0,
            helper_cmd=0,
            regions=[],
            options="",
            max_frames=0,
            usable_sizes=True,
        )


def cached_stacks(
    memory: Memory,
    mappings: Sequence[Mapping],
    threads: Sequence[CapturedThread],
    guards: bool = True,
) -> list[ThreadSlot]:
    """Stacks glibc keeps for reuse after their threads exited (the shim
    records them; here they are recognised): an anonymous mapping right
    above a guard, with no live thread's SP in it and a thread control
    block at its top (tcbhead_t's tcb and self pointing at it) that is no
    live thread's thread pointer. Not roots: a dead thread's frames and TLS
    would keep its leaks alive. guards: False where the mappings do not list
    PROT_NONE ones (gdb's cores; glibc 2.42+, whose guards may be madvise'd
    into the stack's own mapping): the control block decides alone, when its
    struct pthread names the mapping as its stack."""
    sps = [t.sp for t in threads]
    tps = {thread_pointer(t.regs) for t in threads}
    out = []
    with memory_reader(memory) as read:
        for below, m in zip(mappings, mappings[1:], strict=False):
            for lo, hi in _exited_thread_stacks(read, below, m, sps, tps, guards):
                out.append(ThreadSlot(0, THREAD_EXITED, 0, 0, 0, 0, 0, lo, hi))
    return out


def _exited_thread_stacks(
    read: Callable[[int, int], bytes],
    below: Mapping,
    m: Mapping,
    sps: list[int],
    tps: set[int],
    guards: bool,
) -> list[tuple[int, int]]:
    """The stacks in m, above `below`, that no live thread runs on. Without
    guard mappings, neighbouring stacks are one mapping: each control block
    found at the top of what is left names its stack's block, and the
    next stack down ends where that block begins (its guard is the
    block's lowest page)."""
    if not (m.anonymous and m.readable and m.writable and m.private):
        return []
    if guards and (below.end != m.start or below.perms[:3] != "---"):
        return []
    out = []
    end = m.end
    while end > m.start:
        found = _control_block(read, m, end, guards)
        if found is None:
            break
        tcb, lo = found
        if tcb not in tps and not any(lo <= sp < end for sp in sps):
            out.append((lo, end))
        end = lo
    return out


def _control_block(
    read: Callable[[int, int], bytes], m: Mapping, end: int, guards: bool
) -> tuple[int, int] | None:
    """(address, stack bottom) of the thread control block at the top of
    [m.start, end): tcbhead_t's tcb and self pointing at it."""
    begin = max(m.start, end - SEARCH_TOP)
    try:
        raw = read(begin, end - begin)
    except OSError:
        return None
    words = struct.unpack(f"<{len(raw) // 8}Q", raw[: len(raw) // 8 * 8])
    for i in range(len(words) - 2):
        addr = begin + 8 * i
        if words[i] == addr and words[i + 2] == addr:
            if guards:
                return (addr, m.start) if end == m.end else None
            block = _stack_block(words[i : i + PTHREAD_WORDS], m, end)
            if block is not None:
                return addr, max(block, m.start)
    return None


def _stack_block(pthread: Sequence[int], m: Mapping, end: int) -> int | None:
    """Where the stack block the struct pthread whose words follow names
    begins, when it ends at `end`: its stackblock and stackblock_size (two
    words in a row), in m or from below it (a guard mapped apart). Without a
    guard mapping to go by, this tells a thread's stack from the block the
    loader put the main thread's TLS and control block in."""
    for block, size in zip(pthread, pthread[1:], strict=False):
        if 0 < size and block + size == end and (block >= m.start or end == m.end):
            return block
    return None
