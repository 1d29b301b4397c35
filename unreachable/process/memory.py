"""Where a scan reads the target's memory: the process itself, through
/proc/PID/mem (stopped, or its frozen snapshot child), or a finished copy
snapshot (capture/copy_snapshot.py) while the process runs on."""

from __future__ import annotations

import errno
import os
import struct
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial

from unreachable import _native

# A pid, or the copy; every native reader takes either.
Memory = int | _native.MemoryCopy
Read = Callable[[int, int], bytes]  # (addr, n) -> bytes, OSError where unreadable


def _pread(fd: int, addr: int, n: int) -> bytes:
    # A word followed as a pointer may be any value; past off_t's range
    # (2**63) pread cannot even be asked, and no process maps it.
    if not 0 <= addr < 1 << 63:
        raise OSError(errno.EIO, f"address {addr:#x} is outside any process")
    return os.pread(fd, n, addr)


@contextmanager
def memory_reader(memory: Memory) -> Iterator[Read]:
    if isinstance(memory, int):
        fd = os.open(f"/proc/{memory}/mem", os.O_RDONLY)
        try:
            yield partial(_pread, fd)
        finally:
            os.close(fd)
    else:
        yield memory.read


def present_ranges(memory: Memory, ranges: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """The parts of the sorted ranges that hold pages: present or swapped out
    in the process (PAGEMAP_SCAN; all of them on a kernel without it), or
    held by the copy. The rest was never touched and reads as zero."""
    packed = b"".join(struct.pack("<QQ", b, e) for b, e in ranges)
    out = _native.present_ranges(memory, packed)
    return [(b, e) for b, e in struct.iter_unpack("<QQ", out)]


def read_anonymous(memory: Memory, begin: int, end: int) -> bytes:
    """[begin, end) of private anonymous memory. Pages the process never
    touched are zero and not read: reading them through /proc would map the
    zero page into it. Unreadable pages read as zero too."""
    out = bytearray(end - begin)
    parts = present_ranges(memory, [(begin, end)]) if isinstance(memory, int) else [(begin, end)]
    with memory_reader(memory) as read:
        for b, e in parts:
            try:
                data = read(b, e - b)
            except OSError:
                continue
            out[b - begin : b - begin + len(data)] = data
    return bytes(out)
