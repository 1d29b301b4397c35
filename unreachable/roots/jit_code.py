"""Pointers a JIT compiled into its code.

A JIT's code lives in anonymous executable memory (HotSpot's code cache,
V8's and LuaJIT's), which is a root like any anonymous memory, but the
sweep reads aligned words, and an instruction's immediate lies at any byte
offset: HotSpot's inline caches load their CompiledICHolder with a movabs,
so a JVM under the shim had those blocks reported leaked. Every unaligned
8-byte value in such memory that falls within the heap is handed to the
sweep with the registers' values. Elsewhere an unaligned copy of a pointer
is still no reference (as in libmemunreachable and LeakSanitizer).
"""

from __future__ import annotations

from collections.abc import Sequence

from unreachable import _native
from unreachable.process.maps import Mapping
from unreachable.process.memory import Memory, memory_reader, present_ranges
from unreachable.roots.glibc_heaps import Span


def code_words(
    memory: Memory,
    mappings: Sequence[Mapping],
    spans: list[Span],
    read_before: bytes = b"",
) -> bytes:
    """Candidate pointers into the heap (its sorted spans, heap_words.heap_spans)
    at unaligned offsets of JIT code (packed u64). read_before: code read
    earlier (what a fork snapshot's child lacks, kept_out_of_fork.py)."""
    code = sorted((m.start, m.end) for m in mappings if m.anonymous and m.executable and m.readable)
    if not (code or read_before) or not spans:
        return b""
    lo, hi = spans[0][0], spans[-1][1]
    out = [_native.code_words(read_before, lo, hi)]
    try:
        with memory_reader(memory) as read:
            for begin, end in present_ranges(memory, code) if code else []:
                try:
                    out.append(_native.code_words(read(begin, end - begin), lo, hi))
                except OSError:
                    continue  # unreadable: no code to read
    except OSError:
        pass  # the process is going away: the sweep that follows says so
    return b"".join(out)
