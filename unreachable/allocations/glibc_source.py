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
            if _exited_thread_stack(read, below, m, sps, tps, guards):
                out.append(ThreadSlot(0, THREAD_EXITED, 0, 0, 0, 0, 0, m.start, m.end))
    return out


def _exited_thread_stack(
    read: Callable[[int, int], bytes],
    below: Mapping,
    m: Mapping,
    sps: list[int],
    tps: set[int],
    guards: bool,
) -> bool:
    """Whether m, above `below`, is a stack no live thread runs on."""
    if not (m.anonymous and m.readable and m.writable and m.private):
        return False
    if guards and (below.end != m.start or below.perms[:3] != "---"):
        return False
    if any(m.start <= sp < m.end for sp in sps):
        return False
    begin = max(m.start, m.end - SEARCH_TOP)
    try:
        raw = read(begin, m.end - begin)
    except OSError:
        return False
    words = struct.unpack(f"<{len(raw) // 8}Q", raw[: len(raw) // 8 * 8])
    for i in range(len(words) - 2):
        addr = begin + 8 * i
        if words[i] == addr and words[i + 2] == addr:
            return addr not in tps and (guards or _owns_its_stack(words[i:], m))
    return False


def _owns_its_stack(pthread: Sequence[int], m: Mapping) -> bool:
    """Whether the struct pthread whose words follow says m is its stack:
    its stackblock and stackblock_size (two words in a row) span up to m's
    end from m's start or below (a guard mapped apart). Without a guard
    mapping to go by, this tells a thread's stack from the block the loader
    put the main thread's TLS and control block in."""
    return any(
        0 < size and block <= m.start and block + size == m.end
        for block, size in zip(pthread, pthread[1:], strict=False)
    )
