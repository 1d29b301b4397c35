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

from unreachable.process.memory import Memory, read_anonymous


def control_block(memory: Memory, begin: int, end: int) -> tuple[int, int] | None:
    """(address, dtv word) of the thread control block in the top of the
    stack [begin, end), or None: no thread's stack ends there (any more)."""
    # Imported on use: every scan imports this module, and glibc's heap walker
    # only the scans of a process without the shim need.
    from unreachable.allocations.glibc_heap import SEARCH_TOP

    low = max(begin, end - SEARCH_TOP)
    raw = read_anonymous(memory, low, end)
    words = struct.unpack(f"<{len(raw) // 8}Q", raw[: len(raw) // 8 * 8])
    for i in range(len(words) - 2):
        addr = low + 8 * i
        if words[i] == addr and words[i + 2] == addr:
            return addr, words[i + 1]
    return None
