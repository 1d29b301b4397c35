"""Without the shim, each thread's alternate signal stack as the kernel
answered an injected sigaltstack(NULL, &old) in it (native/scanner/
signal_stack_query.c, run by the stopper): the only record of a stack a
program malloc'ed, installed and dropped (Erlang's VM, for each thread).
Asked in the stop the snapshot is made in: the stacks are the ones
installed when the memory is read."""

from __future__ import annotations

import struct
from dataclasses import dataclass

RECORD = struct.Struct("<iiQQ")  # struct ur_signal_stack: tid, pad, sp, size


@dataclass(frozen=True, slots=True)
class SignalStacks:
    records: bytes = b""  # struct ur_signal_stack, one per thread with a stack
    unread: int = 0  # threads not asked (-1: none was)
    why: str = ""  # why the first of them was not

    def words(self) -> bytes:
        """Each enabled stack's address, as a 64-bit word (a root, as the shim's record is)."""
        sps = [sp for _tid, _pad, sp, _size in RECORD.iter_unpack(self.records)]
        return struct.pack(f"<{len(sps)}Q", *sps)

    def note(self) -> str:
        if not self.unread:
            return ""
        which = (
            "the threads' signal stacks"
            if self.unread < 0
            else f"the signal stacks of {self.unread} thread(s)"
        )
        return (
            f"{which} were not read ({self.why}): a block only such a stack holds may be"
            " reported leaked"
        )
