"""Alternate signal stacks: blocks only the kernel holds.

A program may malloc a stack for sigaltstack() and keep no pointer to it;
the kernel keeps it for the thread, and /proc does not show it. The shim
notes each thread's in a table (native/shim/altstack.c, abi.h struct
ur_altstack); the stack of each captured thread becomes a value root, as a
register is. Records of threads that are not among the captured ones
(exited, their tid perhaps not yet reused) are left out.
"""

from __future__ import annotations

import struct

from unreachable import _native
from unreachable.process.memory import Memory, read_anonymous

_ENTRY_SIZE = _native.abi_sizeof("ur_altstack")


def altstack_words(memory: Memory, table: int, count: int, tids: set[int]) -> bytes:
    """The alternate stacks of the threads in tids, as 64-bit words."""
    if not table or not count:
        return b""
    # Only the pages in use: reading the rest would map zero pages into it.
    raw = read_anonymous(memory, table, table + count * _ENTRY_SIZE)
    entries = _native.abi_decode_array("ur_altstack", raw)
    sps = [e["sp"] for e in entries if e["sp"] and e["tid"] in tids]
    return struct.pack(f"<{len(sps)}Q", *sps)
