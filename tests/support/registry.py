"""Build Registry objects by hand for tests of the pure-Python stages."""

from __future__ import annotations

import struct

from unreachable.allocations.registry import Registry, ThreadSlot


def make_registry(
    blocks: list[tuple[int, int]],
    stack_ids: list[int] | None = None,
    threads: list[ThreadSlot] | None = None,
    region: tuple[int, int] = (0x7E0000000000, 0x7F0000000000),
) -> Registry:
    blocks = sorted(blocks)
    allocs = b"".join(struct.pack("<QQ", b, s) for b, s in blocks)
    ids = b"".join(struct.pack("<I", i) for i in (stack_ids or [0] * len(blocks)))
    return Registry(
        allocs=memoryview(allocs).cast("Q"),
        stack_ids=memoryview(ids).cast("I"),
        threads=threads or [],
        locked_shards=[],
        helper_tid=0,
        helper_cmd=0,
        regions=[region],
        options="",
        max_frames=0,
    )
