"""Words of memory read outside the sweep (a fork snapshot's kept-out
memory) are handed to the sweep only where they point into the heap."""

from __future__ import annotations

import struct

from unreachable import _native
from unreachable.process.maps import Mapping
from unreachable.roots.heap_words import anonymous_spans, heap_spans, words_in

MIB = 1 << 20


def _m(start: int, end: int, path: str = "", perms: str = "rw-p", inode: int = 0) -> Mapping:
    return Mapping(start, end, perms, 0, inode, path)


def _pack(*values: int) -> bytes:
    return struct.pack(f"<{len(values)}Q", *values)


def _unpack(raw: bytes) -> list[int]:
    return list(struct.unpack(f"<{len(raw) // 8}Q", raw))


def test_the_spans_are_the_heap_parts_and_the_brk_heap_merged():
    arena, chunk = _m(0x7F0000000000, 0x7F0000400000), _m(0x7F0000400000, 0x7F0000500000)
    brk = _m(0x55000000, 0x55100000, "[heap]")
    heap = {chunk: [(0x7F0000400000, 0x7F0000410000)], arena: [(0x7F0000000000, 0x7F0000400000)]}
    assert heap_spans([arena, chunk, brk], heap) == [
        (0x55000000, 0x55100000),
        (0x7F0000000000, 0x7F0000410000),
    ]
    assert heap_spans([], {}) == []


def test_only_words_inside_a_span_are_kept_in_order():
    spans = [(0x10000, 0x20000), (0x7F0000000000, 0x7F0000100000)]
    words = _pack(
        0x7F00000FFFF8,  # inside the second span
        0x10000,  # a span's first byte
        0x20000,  # one past the first span's end
        0xFFFF,  # below every span
        0x7F0000050001,  # unaligned value: still a pointer into the span
        0x3000000000,  # between the spans (a V8 page, say)
        0x7F0000100000,  # one past the last span
        0,
    )
    packed = b"".join(_pack(b, e) for b, e in spans)
    kept = _unpack(_native.heap_words(words + b"\x01\x02\x03", packed))
    assert kept == [0x7F00000FFFF8, 0x10000, 0x7F0000050001]
    assert _native.heap_words(b"", packed) == b""
    assert _native.heap_words(words, b"") == b""


def test_spans_too_wide_to_hash_are_searched():
    """Past 2^16 MiB of spans the filter searches them instead of hashing
    their 1 MiB regions: the same answer."""
    wide = [(0x100000000000, 0x100000000000 + (1 << 40)), (0x7F0000000000, 0x7F0000001000)]
    packed = b"".join(_pack(b, e) for b, e in wide)
    words = _pack(0x100000000000 + 5 * MIB, 0x7F0000000800, 0x7F0000001000, 0x200000000000)
    assert _unpack(_native.heap_words(words, packed)) == [
        0x100000000000 + 5 * MIB,
        0x7F0000000800,
    ]


def test_words_in_the_mappings_spans():
    brk = _m(0x55000000, 0x55100000, "[heap]")
    words = _pack(0x55000010, 0x56000000)
    assert _unpack(words_in(words, heap_spans([brk], {}))) == [0x55000010]
    assert words_in(words, heap_spans([], {})) == b""


def test_before_the_heap_is_known_every_anonymous_mapping_counts():
    """A fork snapshot's mappings lack what the target keeps out of forks,
    so V8's pointers to its own pages fall outside these spans too."""
    mappings = [
        _m(0x1000, 0x2000),  # anonymous
        _m(0x2000, 0x3000, "[heap]"),
        _m(0x3000, 0x4000, "/usr/lib/libc.so.6", "r--p", 7),  # a file
        _m(0x5000, 0x6000, "[stack]"),
        _m(0x7000, 0x8000, "", "---p"),  # a guard page: unreadable
        _m(0x9000, 0xA000, "[anon:v8]"),
    ]
    assert anonymous_spans(mappings) == [(0x1000, 0x3000), (0x9000, 0xA000)]
