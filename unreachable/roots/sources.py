"""Every source of root values, one function each: words that are roots
wherever they lie, each looked up in the heap on its own.

The ranges of memory that are roots (ELF segments, live threads' stacks
and TLS, anonymous mappings) are classify.py's; a scan's roots are those
ranges plus the values listed here, in this order. The report's `roots`
counts and the reference graph's value sources (retention/collect.py) are
both read off the same list (scan/roots.py).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from unreachable.allocations.registry import Registry
from unreachable.capture.kept_out_of_fork import KeptOut
from unreachable.capture.kernel_held import KernelHeld
from unreachable.capture.stop_world import CapturedThread
from unreachable.process.maps import Mapping
from unreachable.process.memory import Memory
from unreachable.roots.classify import register_words
from unreachable.roots.heap_words import anonymous_spans, message_words, stream_words, words_in
from unreachable.roots.jit_code import code_words
from unreachable.roots.signal_stacks import altstack_words

Span = tuple[int, int]


@dataclass(slots=True, eq=False, repr=False)
class RootValues:
    """Words from one source that are roots wherever they lie."""

    source: str  # what holds them, as the report and the reference graph name it
    words: bytes  # packed little-endian u64
    # Bytes the report's roots count for the source (0: not counted there:
    # registers, exited threads' control blocks).
    reported: int = 0


def _counted(source: str, words: bytes) -> RootValues:
    return RootValues(source, words, len(words))


def epoll_data(held: KernelHeld | None) -> RootValues:
    """The data word of every epoll registration (a pointer, for most event loops)."""
    return _counted("epoll data", held.epoll_words() if held else b"")


def timer_values(held: KernelHeld | None) -> RootValues:
    """The sigev_value of every POSIX timer."""
    return _counted("timer values", held.timer_words() if held else b"")


def signal_values(held: KernelHeld | None) -> RootValues:
    """The values of queued real-time signals (sigqueue)."""
    return _counted("signal values", held.signal_words() if held else b"")


def pipe_data(held: KernelHeld | None, mappings: Sequence[Mapping]) -> RootValues:
    """Bytes in flight in pipes: only values within the heap's bounds."""
    words = stream_words(held.in_flight.pipe_streams, anonymous_spans(mappings)) if held else b""
    return _counted("pipe data", words)


def socket_data(held: KernelHeld | None, mappings: Sequence[Mapping]) -> RootValues:
    """Bytes queued on Unix sockets: only values within the heap's bounds."""
    if held is None:
        return _counted("socket data", b"")
    spans = anonymous_spans(mappings)
    flight = held.in_flight
    words = stream_words(flight.socket_streams, spans)
    words += message_words(flight.socket_messages, spans)
    return _counted("socket data", words)


def signal_stacks(
    memory: Memory,
    altstacks: tuple[int, int] | None,
    threads: Sequence[CapturedThread],
    held: KernelHeld | None = None,
) -> RootValues:
    """Live threads' sigaltstacks, from the shim's table (address, count),
    or without the shim as the kernel answered for each stopped thread."""
    asked = held.signal_stacks if held else b""
    if altstacks is None:
        return _counted("signal stacks", asked)
    table, count = altstacks
    tids = {t.tid for t in threads}
    return _counted("signal stacks", altstack_words(memory, table, count, tids) + asked)


def registers(threads: Sequence[CapturedThread], registry: Registry) -> list[RootValues]:
    """Each thread's general registers, then each thread's vector registers;
    not the shim's helper's while it publishes its frames (they hold the
    shim's values only, native/shim/helper.c)."""
    if registry.helper_frames:
        threads = [t for t in threads if t.tid != registry.helper_tid]
    return [
        *(RootValues(f"registers {t.tid}", register_words([t.regs])) for t in threads),
        *(RootValues(f"vector registers {t.tid}", register_words([t.xstate])) for t in threads),
    ]


def exited_threads_dtvs(dtvs: list[int]) -> RootValues:
    """The TLS vectors of threads that exited, whose stacks glibc caches
    (classify found their control blocks): their dynamic TLS blocks are the
    DTV's, and outlive the thread."""
    return RootValues("exited threads' control blocks", struct.pack(f"<{len(dtvs)}Q", *dtvs))


def jit_code(
    memory: Memory, mappings: Sequence[Mapping], heap: list[Span], kept_out: KeptOut
) -> RootValues:
    """Immediates in JIT code (anonymous executable memory) that point into
    the heap's spans, the code a fork lacks included."""
    return _counted("code immediates", code_words(memory, mappings, heap, kept_out.code))


def kept_out_candidates(kept_out: KeptOut, mappings: Sequence[Mapping]) -> bytes:
    """Of the memory a fork snapshot lacks, read from the target in the
    pause, the words that may point into the heap before its parts are known
    (roots/heap_words.py): what a child sweep would be sent."""
    return words_in(kept_out.words, anonymous_spans(mappings)) if kept_out.words else b""


def kept_out_of_fork(kept_out: KeptOut, candidates: bytes, heap: list[Span]) -> RootValues:
    """Of kept_out_candidates, the words that point into the heap's spans;
    counted in the report as the bytes read."""
    return RootValues("kept out of fork", words_in(candidates, heap), len(kept_out.words))
