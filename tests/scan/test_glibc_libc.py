"""Finding glibc's heap roots without debug symbols (allocations/glibc_libc.py,
glibc_heap.py): on this machine's libc, the heuristics give what libc6-dbg's
symbols give, and each thread's tcache found through its thread pointer is
the same either way."""

from __future__ import annotations

import pytest

from unreachable.allocations import glibc_libc
from unreachable.allocations.glibc_libc import libc_facts

LIBC = "/lib/x86_64-linux-gnu/libc.so.6"


def _facts(monkeypatch: pytest.MonkeyPatch, debug: bool) -> glibc_libc.LibcFacts:
    monkeypatch.setenv("UNREACHABLE_DEBUG_DIRS", "/usr/lib/debug" if debug else "/nonexistent")
    glibc_libc._facts.cache_clear()
    return libc_facts(LIBC)


def test_heuristics_agree_with_debug_symbols(monkeypatch: pytest.MonkeyPatch) -> None:
    symbols = _facts(monkeypatch, True)
    if symbols.how != "debug symbols":
        pytest.skip("libc6-dbg is not installed")
    guessed = _facts(monkeypatch, False)
    assert guessed.how == "heuristics"
    assert (guessed.main_arena, guessed.mp) == (symbols.main_arena, symbols.mp)
    assert guessed.version == symbols.version and guessed.build_id == symbols.build_id
    # malloc.c's code: the span the heuristics take holds the functions' own.
    lo, hi = symbols.malloc_code
    assert guessed.malloc_code[0] <= lo < hi <= guessed.malloc_code[1]
    assert symbols.tcache_tls in {addend for _, addend in guessed.tpoff_slots}
