"""Read recorded backtraces (pcs) out of the shim's stack table."""

from __future__ import annotations

import struct

from unreachable import _native


def read_stacks(mem_pid: int, descriptor_addr: int, ids: set[int]) -> dict[int, tuple[int, ...]]:
    if not ids:
        return {}
    packed = b"".join(struct.pack("<I", i) for i in sorted(ids))
    return dict(_native.read_stacks(mem_pid, descriptor_addr, packed))
