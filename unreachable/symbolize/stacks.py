"""Read recorded backtraces (pcs) out of the shim's stack table."""

from __future__ import annotations

import struct

from unreachable import _native
from unreachable.process.memory import Memory


def read_stacks(memory: Memory, descriptor_addr: int, ids: set[int]) -> dict[int, tuple[int, ...]]:
    if not ids:
        return {}
    packed = b"".join(struct.pack("<I", i) for i in sorted(ids))
    return dict(_native.read_stacks(memory, descriptor_addr, packed))
