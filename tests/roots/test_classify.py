from __future__ import annotations

from tests.support.registry import make_registry
from unreachable.allocations.registry import THREAD_EXITED, THREAD_LIVE, ThreadSlot
from unreachable.process.maps import parse_maps
from unreachable.roots.classify import RED_ZONE, classify, register_words

MAPS = """\
555555554000-555555556000 r--p 00000000 08:01 100 /usr/bin/prog
555555556000-555555558000 r-xp 00002000 08:01 100 /usr/bin/prog
555555558000-555555559000 rw-p 00004000 08:01 100 /usr/bin/prog
555555559000-55555555a000 rw-p 00000000 00:00 0
55555555a000-55555557b000 rw-p 00000000 00:00 0 [heap]
7f0000000000-7f0000021000 rw-p 00000000 00:00 0
7f0000100000-7f0000101000 ---p 00000000 00:00 0
7f0000101000-7f0000901000 rw-p 00000000 00:00 0
7f0000a00000-7f0000a01000 ---p 00000000 00:00 0
7f0000a01000-7f0001201000 rw-p 00000000 00:00 0
7f0002000000-7f0002004000 rw-p 00000000 00:00 0
7f0003000000-7f0003001000 r--p 00000000 00:00 0
7f1000000000-7f1000010000 rw-p 00000000 00:00 0
7f2000000000-7f2000001000 rw-p 00002000 08:01 200 /opt/unreachable/libunreachable_shim.so
7ffffffde000-7ffffffff000 rw-p 00000000 00:00 0 [stack]
7ffffffff000-7ffffffff100 r--p 00000000 00:00 0 [vvar]
"""


def test_classification():
    maps = parse_maps(MAPS)
    registry = make_registry(
        [(0x55555555A010, 24), (0x7F0000000100, 64)],
        threads=[
            ThreadSlot(7, THREAD_EXITED, 0, 0, 0, 0, 0, 0x7F0000A01000, 0x7F0001201000),
        ],
        region=(0x7F1000000000, 0x7F1000010000),
    )
    sps = {1: 0x7FFFFFFFE000, 2: 0x7F0000800000}
    roots = classify(maps, sps, registry, "/opt/unreachable/libunreachable_shim.so")
    ranges = set(roots.ranges)
    assert (0x555555558000, 0x555555559000) in ranges  # .data
    assert (0x555555559000, 0x55555555A000) in ranges  # anonymous .bss tail
    assert (0x7FFFFFFFE000 - RED_ZONE, 0x7FFFFFFFF000) in ranges  # main stack from SP
    assert (0x7F0000800000 - RED_ZONE, 0x7F0000901000) in ranges  # thread stack from SP
    assert (0x7F0002000000, 0x7F0002004000) in ranges  # user pool
    assert (0x7F0003000000, 0x7F0003001000) in ranges  # read-only anonymous: still a root
    covered = [r for r in roots.ranges]
    for b, e in covered:
        assert not (b <= 0x55555555A010 < e), "[heap] must not be a root"
        assert not (b <= 0x7F0000000100 < e), "an arena holding allocations is heap"
        assert not (b < 0x7F0001201000 and e > 0x7F0000A01000), "exited thread's cached stack"
        assert not (b < 0x7F1000010000 and e > 0x7F1000000000), "shim region"
        assert not (b < 0x7F2000001000 and e > 0x7F2000000000), "shim ELF data"
        assert not (b < 0x7F0000100000 + 0x1000 and e > 0x7F0000100000), "PROT_NONE guard"
    assert roots.kinds["heap"] == 0x21000 + 0x21000
    assert roots.kinds["exited-thread stack"] == 0x800000


def test_untouched_anonymous_pages_are_left_out():
    """The present callback trims anonymous roots (and only those) to the
    pages that exist; the rest is counted as untouched."""
    maps = parse_maps(MAPS)
    registry = make_registry([(0x55555555A010, 24)], region=(0x7F1000000000, 0x7F1000010000))
    asked: list[list[tuple[int, int]]] = []

    def present(spans):
        asked.append(list(spans))
        return [(0x7F0002001000, 0x7F0002002000)]  # one page of the user pool

    roots = classify(
        maps,
        {1: 0x7FFFFFFFE000},
        registry,
        "/opt/unreachable/libunreachable_shim.so",
        present=present,
    )
    assert len(asked) == 1 and (0x7F0002000000, 0x7F0002004000) in asked[0]
    assert (0x555555558000, 0x555555559000) not in asked[0]  # a file's .data: not asked
    ranges = set(roots.ranges)
    assert (0x7F0002001000, 0x7F0002002000) in ranges
    assert (0x7F0002000000, 0x7F0002004000) not in ranges
    assert (0x555555558000, 0x555555559000) in ranges  # .data kept whole
    assert roots.kinds["anonymous"] == 0x1000
    assert roots.kinds["untouched"] == sum(e - b for b, e in asked[0]) - 0x1000


def test_register_words_keeps_whole_words():
    assert register_words([b"\1" * 8 + b"\2" * 3, b"\3" * 16]) == b"\1" * 8 + b"\3" * 16


def test_only_glibcs_parts_of_a_merged_mapping_are_heap():
    """heap (glibc_heaps.heap_parts) names the parts of anonymous mappings
    that are glibc's; the rest of each is the program's: a root, a thread's
    stack (from SP) included."""
    maps = parse_maps(MAPS)
    registry = make_registry([(0x7F0000000100, 64)], region=(0x7F1000000000, 0x7F1000010000))
    pool = next(m for m in maps if m.start == 0x7F0002000000)
    stack = next(m for m in maps if m.start == 0x7F0000101000)
    chunk_in_pool = (0x7F0002001000, 0x7F0002002000)
    chunk_in_stack = (0x7F0000880000, 0x7F0000890000)
    sp = 0x7F0000800000
    roots = classify(
        maps,
        {1: 0x7FFFFFFFE000, 2: sp},
        registry,
        "/opt/unreachable/libunreachable_shim.so",
        heap={pool: [chunk_in_pool], stack: [chunk_in_stack]},
    )
    ranges = set(roots.ranges)
    assert {(0x7F0002000000, 0x7F0002001000), (0x7F0002002000, 0x7F0002004000)} <= ranges
    assert {(sp - RED_ZONE, 0x7F0000880000), (0x7F0000890000, 0x7F0000901000)} <= ranges
    for b, e in roots.ranges:
        for chunk_b, chunk_e in (chunk_in_pool, chunk_in_stack):
            assert not (b < chunk_e and e > chunk_b)
    assert roots.kinds["heap"] == 0x1000 + 0x10000 + 0x21000  # and [heap]
    # The arena mapping, which heap does not name, is a root.
    assert (0x7F0000000000, 0x7F0000021000) in ranges


def test_a_live_threads_stack_merged_with_others_ends_at_its_own_top():
    """glibc 2.42's stacks, their guards madvise'd inside, are one mapping:
    a live thread's stack root runs from its SP to the top of its own stack,
    not on over the stack above it; its dead frames below SP stay out. (The
    rest of the mapping is left to what it holds: here, with no memory to
    find exited threads' control blocks in, a root.)"""
    maps = parse_maps(
        "7f0000000000-7f0001803000 rw-p 00000000 00:00 0\n"
        "7ffffffde000-7ffffffff000 rw-p 00000000 00:00 0 [stack]\n"
    )
    live_lo, live_hi = 0x7F0000802000, 0x7F0001002000
    registry = make_registry(
        [],
        threads=[ThreadSlot(5, THREAD_LIVE, 0, 0, 0, 0, 0, live_lo, live_hi)],
        region=(0x7F1000000000, 0x7F1000010000),
    )
    sp = 0x7F0000F00000
    roots = classify(maps, {1: 0x7FFFFFFFE000, 5: sp}, registry, "/opt/shim.so")
    stack = [r for r, k in zip(roots.ranges, roots.range_kinds, strict=True) if k == "stack"]
    assert stack == [(sp - RED_ZONE, live_hi), (0x7FFFFFFFE000 - RED_ZONE, 0x7FFFFFFFF000)]
    assert not any(b < sp - RED_ZONE and e > live_lo for b, e in roots.ranges)
