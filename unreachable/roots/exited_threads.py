"""What glibc still owns inside the cached stack of an exited thread.

A cached stack is not a root: the dead thread's TLS and frames must not keep
its blocks alive. But glibc keeps the thread's DTV (a calloc'ed block) for
reuse, referenced from the thread control block at the top of the cached
stack. The control block is found by its fingerprint, tcbhead_t's `tcb` and
`self` fields both pointing at the block itself, and only its `dtv` word
becomes a root.
"""

from __future__ import annotations

import struct

from unreachable.allocations.glibc_heap import SEARCH_TOP
from unreachable.process.maps import Mapping
from unreachable.process.memory import Memory, read_anonymous


def dtv_words(memory: Memory, dead_stacks: list[Mapping]) -> bytes:
    out = bytearray()
    if not dead_stacks:
        return bytes(out)
    for m in dead_stacks:
        begin = max(m.start, m.end - SEARCH_TOP)
        raw = read_anonymous(memory, begin, m.end)
        words = struct.unpack(f"<{len(raw) // 8}Q", raw[: len(raw) // 8 * 8])
        for i in range(len(words) - 2):
            addr = begin + 8 * i
            if words[i] == addr and words[i + 2] == addr:
                out += struct.pack("<Q", words[i + 1])
                break
    return bytes(out)
