"""Words read outside the sweep's memory that may point into the heap.

A fork snapshot lacks the memory its target keeps out of forks (node's V8
heap: capture/kept_out_of_fork.py); it is read in the pause and its words
are handed to the sweep as root values, each looked up on its own. Nearly
all of V8's words are V8's own pointers: node with 96 MiB kept out sent
~12M of them to the snapshot child, which took longer than the rest of the
sweep. A word outside the spans where blocks lie names no block, so only
the others are handed over.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from unreachable import _native
from unreachable.process.maps import Mapping
from unreachable.roots.glibc_heaps import Span


def heap_spans(mappings: Sequence[Mapping], heap: dict[Mapping, list[Span]]) -> list[Span]:
    """Where blocks lie, sorted and merged: the heap's parts of the anonymous
    mappings that hold registered blocks, and the brk heap."""
    return _merged(
        [s for parts in heap.values() for s in parts]
        + [(m.start, m.end) for m in mappings if m.path == "[heap]"]
    )


def anonymous_spans(mappings: Sequence[Mapping]) -> list[Span]:
    """Where blocks may lie before the heap's parts are known: every readable
    anonymous mapping, and the brk heap (a fork snapshot's mappings lack the
    memory kept out of forks, so V8's pointers to its own pages fall
    outside)."""
    return _merged(
        [(m.start, m.end) for m in mappings if m.readable and (m.anonymous or m.path == "[heap]")]
    )


def _merged(spans: list[Span]) -> list[Span]:
    merged: list[Span] = []
    for begin, end in sorted(spans):
        if merged and begin <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((begin, end))
    return merged


def words_in(words: bytes | bytearray, spans: list[Span]) -> bytes:
    """The aligned 8-byte values of words inside sorted, disjoint spans."""
    if not words or not spans:
        return b""
    return _native.heap_words(words, b"".join(struct.pack("<QQ", b, e) for b, e in spans))


def stream_words(streams: Sequence[bytes], spans: list[Span]) -> bytes:
    """A stream's 8-byte values at every offset that lie in the spans: a
    stream's bytes carry no alignment (a pipe, a stream socket)."""
    if not spans:
        return b""
    lo, hi = spans[0][0], spans[-1][1]
    out = []
    for data in streams:
        out.append(words_in(_aligned(data), spans))
        out.append(words_in(_native.code_words(data, lo, hi), spans))
    return b"".join(out)


def message_words(messages: Sequence[bytes], spans: list[Span]) -> bytes:
    """The aligned 8-byte values of each datagram that lie in the spans."""
    return b"".join(words_in(_aligned(m), spans) for m in messages)


def _aligned(data: bytes) -> bytes:
    return data[: len(data) // 8 * 8]
