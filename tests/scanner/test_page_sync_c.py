"""C unit test of the copy snapshot's page sync (see c/page_sync_test.c)
under ASan+UBSan, against a real process that write-protects its own memory
with an asynchronous userfaultfd; tests/capture/test_copy_snapshot.py runs
the whole copy snapshot on scan targets."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.cbuild import INCLUDE_DIR, NATIVE_DIR, UNIT_TEST_INCLUDE, build, native_sources

SCANNER = NATIVE_DIR / "scanner"
MARK = NATIVE_DIR / "mark"


def run_scanner_c(name: str, sources: list[Path]) -> str:
    """Build c/NAME.c with sources under ASan and UBSan, run it, and return
    its output (the program exits 0)."""
    exe = build(
        [Path(__file__).parent / "c" / f"{name}.c", *sources, *native_sources("mark", "alloc.c")],
        name=name,
        cflags=[
            f"-I{SCANNER}",
            f"-I{MARK}",
            f"-I{INCLUDE_DIR}",
            f"-I{UNIT_TEST_INCLUDE}",
            "-pthread",
        ],
        ldflags=["-pthread"],
        sanitize=True,
    )
    env = {"ASAN_OPTIONS": "detect_leaks=1", "UBSAN_OPTIONS": "print_stacktrace=1"}
    result = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout.strip()


def test_page_sync() -> None:
    out = run_scanner_c(
        "page_sync_test",
        native_sources("scanner", "page_sync.c", "memory.c", "cow.c", "pin_gate.c"),
    )
    if out.startswith("skip:"):
        pytest.skip(out)
    assert out == "ok page_sync"


def test_read_live() -> None:
    """ur_mem_read_live (c/read_live_test.c): process_vm_readv for the pages
    a stopped process maps alone while the pin gate is open for it,
    /proc/PID/mem for the rest, spans of any alignment."""
    assert (
        run_scanner_c(
            "read_live_test", native_sources("scanner", "memory.c", "cow.c", "pin_gate.c")
        )
        == "ok read_live"
    )


def test_read_runs() -> None:
    """ur_mem_read_runs_into (c/read_runs_test.c): scattered runs of one chunk
    read in one pass, shared pages through /proc/PID/mem and left shared,
    the process's own through one process_vm_readv while the pin gate is
    open, none with it shut, the page it made PROT_NONE read all the same."""
    assert (
        run_scanner_c(
            "read_runs_test", native_sources("scanner", "memory.c", "cow.c", "pin_gate.c")
        )
        == "ok read_runs"
    )


def test_chunk_cache() -> None:
    """The chunk cache's slot choice once full (c/chunk_cache_test.c): a
    forward read reuses the slot of the chunk before; a read that entered a
    chunk mid-way (a graph builder taking another's share from the back)
    crosses into the next without evicting it, so no piece loads twice."""
    assert (
        run_scanner_c(
            "chunk_cache_test", native_sources("scanner", "memory.c", "cow.c", "pin_gate.c")
        )
        == "ok chunk_cache"
    )
