"""Finding glibc's heap roots without debug symbols (allocations/glibc_libc.py,
glibc_heap.py): on this machine's libc, the heuristics give what libc6-dbg's
symbols give, and each thread's tcache found through its thread pointer is
the same either way."""

from __future__ import annotations

from pathlib import Path

import pytest

from unreachable.allocations import glibc_libc
from unreachable.allocations.glibc_heap import (
    find_libc,
    not_glibc_malloc,
    thread_pointer,
    thread_tcaches,
)
from unreachable.allocations.glibc_libc import libc_facts
from unreachable.process.maps import Mapping, read_maps
from unreachable.scan.glibc import _stop_and_copy

PROGRAMS = Path(__file__).parent / "programs"
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


@pytest.mark.parametrize("debug", [True, False])
def test_tcaches_and_arena_in_a_live_process(targets, monkeypatch, debug) -> None:
    facts = _facts(monkeypatch, debug)
    if debug and facts.how != "debug symbols":
        pytest.skip("libc6-dbg is not installed")
    target = targets.start(PROGRAMS / "thread_stack.c", preload=False, wait_helper=False)
    libc = find_libc(target.pid, read_maps(target.pid))
    got = _stop_and_copy(target.pid, libc)
    assert not isinstance(got, str), got
    try:
        tps = [thread_pointer(t.regs) for t in got.threads]
        tcaches = thread_tcaches(got.copy, libc, got.tls, tps)
        # Both threads have malloc'ed: each has a tcache of its own, whose
        # chunk is glibc's 0x290 bytes.
        assert len(tcaches) == 2 and all(tcaches) and len(set(tcaches)) == 2
        for tc in tcaches:
            assert int.from_bytes(got.copy.read(tc - 8, 8), "little") & ~7 == 0x290
        # mp_.sbrk_base is the start of the brk heap.
        heap = next(m for m in got.mappings if m.path == "[heap]")
        sbrk_base = int.from_bytes(got.copy.read(libc.bias + facts.mp + 0x60, 8), "little")
        assert sbrk_base == heap.start
        # main_arena's next ring holds the worker's arena and returns.
        arena = libc.bias + facts.main_arena
        nxt = int.from_bytes(got.copy.read(arena + 0x870, 8), "little")
        assert nxt != arena
        assert int.from_bytes(got.copy.read(nxt + 0x870, 8), "little") == arena
    finally:
        got.close()
    assert target.alive() and target.tracer() == 0


def test_allocators_other_than_glibc_are_named() -> None:
    def maps(*paths: str) -> list[Mapping]:
        return [
            Mapping(0x1000 * (i + 1), 0x1000 * (i + 2), "r--p", 0, 1, p)
            for i, p in enumerate(paths)
        ]

    glibc = "/usr/lib/x86_64-linux-gnu/libc.so.6"
    assert not_glibc_malloc(maps("/usr/bin/cat", glibc)) == ""
    assert "jemalloc (libjemalloc.so.2)" in not_glibc_malloc(
        maps("/usr/lib/x86_64-linux-gnu/libjemalloc.so.2", glibc)
    )
    assert "tcmalloc" in not_glibc_malloc(maps("/usr/lib/libtcmalloc_minimal.so.4", glibc))
    assert "musl" in not_glibc_malloc(maps("/usr/bin/app", "/lib/ld-musl-x86_64.so.1"))
    assert "static binary" in not_glibc_malloc(maps("/usr/bin/app"))
