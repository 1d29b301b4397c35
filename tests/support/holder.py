"""A Python process that maps memory, fills it, prints its address and
holds it until its stdin closes: a live target for the native readers."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def python_holder(source: str) -> Iterator[tuple[int, int]]:
    """(pid, the address source printed) while the process runs."""
    proc = subprocess.Popen(
        [sys.executable, "-c", source], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        yield proc.pid, int(proc.stdout.readline())
    finally:
        proc.kill()
        proc.wait()


def chained_blocks(size: int, block: int, break_every: int, flags: str = "") -> str:
    """Python source that maps size bytes of anonymous memory as `m` (mmap's
    flags argument `flags`, if given) at `addr`, laid out as block-byte
    "blocks", each one's first word pointing to the next and every
    break_every-th pointing nowhere (the chain after it is unreachable)."""
    flags_arg = f", flags={flags}" if flags else ""
    return f"""
import array, ctypes, mmap
m = mmap.mmap(-1, {size}{flags_arg})
addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
words = array.array("Q", bytes({size}))
n = {size} // {block}
words[0::{block // 8}] = array.array("Q", range(addr + {block}, addr + (n + 1) * {block}, {block}))
words[({break_every} - 1) * {block // 8}::{break_every * block // 8}] = array.array(
    "Q", bytes(8 * len(range({break_every} - 1, n, {break_every})))
)
m[:] = words.tobytes()
"""
