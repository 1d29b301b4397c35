"""Reading a process's memory through /proc/PID/mem (process/memory.py)."""

from __future__ import annotations

import ctypes
import os

import pytest

from unreachable.process.memory import memory_reader


def test_reads_the_process() -> None:
    buf = ctypes.create_string_buffer(b"unreachable")
    with memory_reader(os.getpid()) as read:
        assert read(ctypes.addressof(buf), 11) == b"unreachable"


@pytest.mark.parametrize("addr", [1 << 63, (1 << 64) - 8, (1 << 64) + 8, -8])
def test_an_address_no_process_maps_is_unreadable(addr: int) -> None:
    """A word followed as a pointer may hold any value: beyond off_t's range
    it is unreadable like any unmapped address, not an OverflowError (the
    arena finder's walk of `next` pointers ended scans with one)."""
    with memory_reader(os.getpid()) as read, pytest.raises(OSError):
        read(addr, 8)
