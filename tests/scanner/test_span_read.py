"""_native.read_spans: another process's memory, span after span, into one
buffer (the fork pause's read of what a snapshot child lacks)."""

from __future__ import annotations

import struct
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.support.holder import python_holder
from unreachable import _native

PAGE = 4096

# Maps 8 MiB (every byte a known pattern) and unmaps its page 3 (a PROT_NONE
# page would still be read: /proc/PID/mem reads it), prints the address,
# then waits.
HOLDER = """
import ctypes, mmap, sys
size = 8 << 20
m = mmap.mmap(-1, size)
for page in range(size // 4096):
    m[page * 4096 : (page + 1) * 4096] = bytes([page % 251 + 1]) * 4096
addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
libc = ctypes.CDLL(None, use_errno=True)
assert libc.munmap(ctypes.c_void_p(addr + 3 * 4096), 4096) == 0
print(addr, flush=True)
sys.stdin.read()
"""


def _expected(page: int) -> bytes:
    return bytes([page % 251 + 1]) * PAGE


@pytest.fixture
def holder() -> Iterator[tuple[int, int]]:
    with python_holder(HOLDER) as held:
        yield held


def _pack(spans: list[tuple[int, int]]) -> bytes:
    return b"".join(struct.pack("<QQ", b, e) for b, e in spans)


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_spans_land_end_to_end_and_an_unreadable_page_stays_zero(holder, threads):
    pid, addr = holder
    # Page 1 to 10 (page 3 unreadable), then the last 4 MiB: big enough to
    # be split between threads, pieces crossing the span boundary.
    spans = [(addr + PAGE, addr + 10 * PAGE), (addr + (4 << 20), addr + (8 << 20))]
    out = bytearray(sum(e - b for b, e in spans) + 100)
    got = _native.read_spans(pid, _pack(spans), out, threads)
    assert got == len(out) - 100 - PAGE
    want = b"".join(
        bytes(PAGE) if page == 3 else _expected(page)
        for b, e in spans
        for page in range((b - addr) // PAGE, (e - addr) // PAGE)
    )
    assert bytes(out[: len(want)]) == want
    assert bytes(out[len(want) :]) == bytes(100)  # past the spans: untouched


def test_a_span_need_not_be_page_aligned(holder):
    pid, addr = holder
    out = bytearray(10)
    assert _native.read_spans(pid, _pack([(addr + PAGE - 5, addr + PAGE + 5)]), out, 2) == 10
    assert bytes(out) == _expected(0)[:5] + _expected(1)[:5]


def test_bad_input_is_refused(holder):
    pid, addr = holder
    with pytest.raises(ValueError, match="smaller than the spans"):
        _native.read_spans(pid, _pack([(addr, addr + PAGE)]), bytearray(PAGE - 1), 1)
    with pytest.raises(ValueError, match="ends before it begins"):
        _native.read_spans(pid, _pack([(addr + PAGE, addr)]), bytearray(PAGE), 1)
    with pytest.raises(TypeError):
        _native.read_spans(pid, _pack([(addr, addr + PAGE)]), bytes(PAGE), 1)  # read-only


def test_a_process_that_is_gone_raises(holder):
    _, addr = holder
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    with pytest.raises(OSError) as e:
        _native.read_spans(dead.pid, _pack([(addr, addr + PAGE)]), bytearray(PAGE), 1)
    assert e.value.errno == 3  # ESRCH


def test_many_small_spans_land_each_in_its_place_around_an_unreadable_one(holder):
    """Small spans, many of them (the concurrent mark's candidates), each
    land in their place, and only the one that cannot be read stays zero."""
    pid, addr = holder
    # 240-byte spans every 700 bytes over pages 0-9 (page 3 among them),
    # then over pages 4-9 only.
    for first in (0, 4):
        at = range(first * PAGE + 8, 10 * PAGE - 240, 700)
        spans = [(addr + a, addr + a + 240) for a in at]
        out = bytearray(240 * len(spans))
        got = _native.read_spans(pid, _pack(spans), out, 1)
        pages = [(a - addr) // PAGE for b, _ in spans for a in range(b, b + 240)]
        assert bytes(out) == bytes(0 if page == 3 else page % 251 + 1 for page in pages)
        assert got == sum(page != 3 for page in pages)
