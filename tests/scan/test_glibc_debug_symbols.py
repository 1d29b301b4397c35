"""Reading libc's debug symbols (allocations/glibc_libc.py `_debug_symbols`),
which every scan without the shim does once per process: the one-pass
unpacking of `.symtab` finds exactly what pyelftools' per-symbol walk finds,
and costs a bounded number of Python calls rather than hundreds per symbol
(the walk took ~0.27 s of a 0.3 s scan of a small target)."""

from __future__ import annotations

import sys
from types import FrameType

import pytest

from unreachable.allocations import glibc_libc
from unreachable.symbolize.config import default_debug_dirs
from unreachable.symbolize.debuginfo import find_debug_file
from unreachable.symbolize.elf_file import read_elf

LIBC = "/lib/x86_64-linux-gnu/libc.so.6"


def _debug_file(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("UNREACHABLE_DEBUG_DIRS", "/usr/lib/debug")
    found = find_debug_file(read_elf(LIBC), LIBC, default_debug_dirs(), "")
    if found is None:
        pytest.skip("libc6-dbg is not installed")
    return found.path


def _by_pyelftools(path: str) -> dict[str, tuple[int, int]]:
    """What the per-symbol walk found: the reference."""
    from elftools.elf.elffile import ELFFile

    wanted = {"main_arena", "mp_", "tcache", *glibc_libc.MALLOC_ENTRIES}
    out: dict[str, tuple[int, int]] = {}
    source = ""
    with open(path, "rb") as f:
        for sym in ELFFile(f).get_section_by_name(".symtab").iter_symbols():
            kind, value = sym["st_info"]["type"], sym["st_value"]
            if kind == "STT_FILE":
                source = sym.name
            elif kind == "STT_FUNC" and source == "malloc.c" and value:
                out.setdefault(sym.name, (value, sym["st_size"]))
            if sym.name in wanted and (value or sym.name == "tcache"):
                out.setdefault(sym.name, (value, sym["st_size"]))
    return out


def test_same_symbols_as_a_per_symbol_walk(monkeypatch: pytest.MonkeyPatch) -> None:
    expected = _by_pyelftools(_debug_file(monkeypatch))
    assert {"main_arena", "mp_", "malloc"} <= expected.keys()
    assert glibc_libc._debug_symbols(LIBC, "", None) == expected


def test_python_calls_do_not_grow_with_the_symbols(monkeypatch: pytest.MonkeyPatch) -> None:
    _debug_file(monkeypatch)
    glibc_libc._debug_symbols(LIBC, "", None)  # imports done outside the count
    calls = 0

    def count(_frame: FrameType, event: str, _arg: object) -> None:
        nonlocal calls
        calls += event == "call"

    sys.setprofile(count)
    try:
        glibc_libc._debug_symbols(LIBC, "", None)
    finally:
        sys.setprofile(None)
    # Some 10,000 symbols: a walk parsing each through construct makes
    # ~180 calls a symbol (1.8M); opening the files and their headers, a few
    # thousand.
    assert calls < 50_000, calls
